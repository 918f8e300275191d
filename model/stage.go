package model

import (
	"fmt"

	"trellis/arch"
	"trellis/device"
)

// A pipeline stage holds blocks [lo, hi) of the model (and, the first, the
// embedding; the last, the head). Its stash per micro-batch is arch's
// StageStash: the residual streams lo..hi, the blocks' activations and,
// for the last stage, the head's.

// StageStashBytes is the size of one stage stash: its fp32 and 16-bit
// activations and the (B,T) input and target tokens (every stage records
// the batch: dropout is keyed by its step and position).
func (m *GPT) StageStashBytes(lo, hi int, head bool) int64 {
	f, h := m.stageElems(lo, hi, head)
	return 4*int64(f) + 2*int64(h) + int64(m.d.arch(m.B, m.T).TokenBytes())
}

// BoundaryFloats is the size of the activation (and of its gradient) a
// pipeline stage sends to the next: one residual stream on the runner's
// part, B·T·C (B·T·C/t with sequence parallelism).
func (m *GPT) BoundaryFloats() int { return m.d.tokens(m.B*m.T) * m.cfg.Hidden }

func (m *GPT) checkStage(lo, hi int, head bool) error {
	c := m.cfg
	if lo < 0 || hi > c.Layers || lo > hi || (head && hi != c.Layers) {
		return fmt.Errorf("model: stage blocks [%d, %d) (head %v) do not fit layers=%d", lo, hi, head, c.Layers)
	}
	return nil
}

// NewStageStash allocates the stash of a pipeline stage holding blocks
// [lo, hi) (tag act), on the runner's part: Residual(l) exists for
// lo ≤ l ≤ hi, block activations for lo ≤ l < hi, the head's only when
// head is set (then hi must be L). A stage receives its input into
// Residual(lo), runs BlockForward(l) for l in [lo, hi) (EmbedForward first
// when lo = 0, HeadForward last with the head) and sends Residual(hi).
func (m *GPT) NewStageStash(lo, hi int, head bool) (*Stash, error) {
	if err := m.checkStage(lo, hi, head); err != nil {
		return nil, err
	}
	f, h := m.stageElems(lo, hi, head)
	what := "stage stash"
	if lo == 0 && hi == m.cfg.Layers && head {
		what = "stash"
	}
	s, err := m.allocStash(what, f, h)
	if err != nil {
		return nil, err
	}
	m.carveStage(s, lo, hi, head)
	return s, nil
}

// ReshapeStageStash lays a free stage stash out again for blocks [lo, hi)
// (head as in NewStageStash), in place: a pipeline rank reuses the stash a
// micro-batch of one chunk has finished with for another chunk, so that it
// holds as many stashes as it has micro-batches in flight over all its
// chunks, not the sum of each chunk's peak. The stash's buffers must hold
// the stage's activations.
func (m *GPT) ReshapeStageStash(s *Stash, lo, hi int, head bool) error {
	if err := m.checkStage(lo, hi, head); err != nil {
		return err
	}
	if s.buf == nil {
		return fmt.Errorf("model: stash has been freed")
	}
	f, h := m.stageElems(lo, hi, head)
	if f > len(s.buf.Data) {
		return fmt.Errorf("model: a stash of %d values cannot hold blocks [%d, %d) (head %v): %d values", len(s.buf.Data), lo, hi, head, f)
	}
	if have := s.halfCap(); h > have {
		return fmt.Errorf("model: a stash of %d 16-bit values cannot hold blocks [%d, %d) (head %v): %d values", have, lo, hi, head, h)
	}
	m.carveStage(s, lo, hi, head)
	return nil
}

// StashCap is the number of fp32 values the stash's buffer holds.
func (s *Stash) StashCap() int {
	if s.buf == nil {
		return 0
	}
	return len(s.buf.Data)
}

func (s *Stash) halfCap() int {
	if s.half == nil {
		return 0
	}
	return len(s.half.Bits)
}

func (s *Stash) carver() *carver {
	cv := &carver{f: s.buf.Data}
	if s.half != nil {
		cv.h, cv.half = s.half.Bits, s.half.DType()
	}
	return cv
}

// carveStage points s's residuals lo..hi, blocks [lo, hi) and (with head)
// the head's activations into its buffers, and every other layer at
// nothing.
func (m *GPT) carveStage(s *Stash, lo, hi int, head bool) {
	c := m.cfg
	s.res, s.blocks = make([][]float32, c.Layers+1), make([]blockActs, c.Layers)
	m.DetachHead(s)
	nC := m.d.tokens(m.B*m.T) * c.Hidden
	cv := s.carver()
	for l := lo; l <= hi; l++ {
		s.res[l] = cv.f32(nC)
	}
	m.carveBlocks(s, lo, hi, cv)
	if head {
		s.head = m.carveHead(cv)
	}
}

// HeadStash holds the head's activations of one micro-batch on the last
// pipeline stage apart from the blocks' stash, because they live only
// from HeadForward to HeadBackward: a pipeline keeps one per micro-batch
// between its last chunk's F and B.
type HeadStash struct {
	buf  *device.Buffer
	half *device.Buffer // the operands under a 16-bit policy
}

// HeadStashBytes is a head stash's size: arch's HeadSaved.
func (m *GPT) HeadStashBytes() int64 {
	f, h := m.headElems()
	return 4*int64(f) + 2*int64(h)
}

func (m *GPT) headElems() (f, h int) {
	e := arch.Sum(m.cfg.HeadSaved(m.d.arch(m.B, m.T)), m.d.half)
	f, h, _ = e.Ints()
	return f, h
}

// NewHeadStash allocates a head stash (tag act).
func (m *GPT) NewHeadStash() (*HeadStash, error) {
	f, n := m.headElems()
	buf, err := m.dev.Alloc(device.Act, f)
	if err != nil {
		return nil, fmt.Errorf("model: head stash: %w", err)
	}
	h := &HeadStash{buf: buf}
	if n > 0 {
		if h.half, err = m.dev.AllocOf(device.Act, m.pol.Stash, n); err != nil {
			h.Free()
			return nil, fmt.Errorf("model: head stash: %w", err)
		}
	}
	return h, nil
}

// Free returns the memory. Freeing twice is a no-op.
func (h *HeadStash) Free() {
	if h.buf != nil {
		h.buf.Free()
		h.half.Free()
		h.buf, h.half = nil, nil
	}
}

// AttachHead lends h to s for the head's activations: s must be a stage
// stash whose blocks end at L, laid out without the head.
func (m *GPT) AttachHead(s *Stash, h *HeadStash) error {
	L := m.cfg.Layers
	if h.buf == nil || s.buf == nil || s.res[L] == nil {
		return fmt.Errorf("model: a head stash needs a live stage stash that ends at block %d", L)
	}
	cv := &carver{f: h.buf.Data}
	if h.half != nil {
		cv.h, cv.half = h.half.Bits, h.half.DType()
	}
	s.head = m.carveHead(cv)
	return nil
}

// DetachHead takes the head's activations back from s.
func (m *GPT) DetachHead(s *Stash) { s.head = headActs{} }

// WeightStash holds, between a block's split backward passes, the output
// gradients of its four linears, from which the weight gradients are
// computed later (zero-bubble pipeline schedules defer them to fill the
// bubble; Qi et al. 2023): arch's DeferredSaved per block, tag act.
type WeightStash struct {
	buf    *device.Buffer
	lo, hi int
	d      []deferred // (hi−lo)
}

// deferred are one block's saved output gradients (fp32): the row
// layers' (B·T, C) full, the column ones' (B·T, ·) of the rank's columns
// (fc: GPT-2's c_fc, a Llama's gate_up; qkv: c_attn, q_proj–v_proj).
type deferred struct {
	fc2, fc, proj, qkv []float32
}

// WeightStashFloats is the size of a WeightStash for blocks [lo, hi).
func (m *GPT) WeightStashFloats(lo, hi int) int {
	e := arch.Sum(m.cfg.DeferredSaved(m.d.arch(m.B, m.T)), false)
	return (hi - lo) * int(e.F32)
}

// NewWeightStash allocates the deferred output gradients of blocks [lo, hi).
func (m *GPT) NewWeightStash(lo, hi int) (*WeightStash, error) {
	if lo < 0 || hi > m.cfg.Layers || lo > hi {
		return nil, fmt.Errorf("model: weight stash blocks [%d, %d) do not fit layers=%d", lo, hi, m.cfg.Layers)
	}
	buf, err := m.dev.Alloc(device.Act, m.WeightStashFloats(lo, hi))
	if err != nil {
		return nil, fmt.Errorf("model: weight stash: %w", err)
	}
	w := &WeightStash{buf: buf, lo: lo, hi: hi}
	cv := &carver{f: buf.Data}
	decl := m.cfg.DeferredSaved(m.d.arch(m.B, m.T))
	names := [4]string{"mlp.c_proj.dy", "mlp.c_fc.dy", "attn.c_proj.dy", "attn.c_attn.dy"}
	if m.d.llama {
		names = [4]string{"mlp.down_proj.dy", "mlp.gate_up.dy", "self_attn.o_proj.dy", "self_attn.qkv.dy"}
	}
	for l := lo; l < hi; l++ {
		t := cv.saved(decl)
		w.d = append(w.d, deferred{fc2: get(t, names[0]).F32(), fc: get(t, names[1]).F32(),
			proj: get(t, names[2]).F32(), qkv: get(t, names[3]).F32()})
	}
	return w, nil
}

// Free returns the memory. Freeing twice is a no-op.
func (w *WeightStash) Free() {
	if w.buf != nil {
		w.buf.Free()
		w.buf = nil
	}
}

func (w *WeightStash) of(l int) (*deferred, error) {
	if w.buf == nil || l < w.lo || l >= w.hi {
		return nil, fmt.Errorf("model: block %d is not in the weight stash [%d, %d)", l, w.lo, w.hi)
	}
	return &w.d[l-w.lo], nil
}
