package model

import (
	"fmt"

	"trellis/device"
)

// StageStashFloats is the number of fp32 values a pipeline stage holding
// blocks [lo, hi) keeps per micro-batch: its residual streams lo..hi, its
// blocks' activations and, for the last stage (head), the final LayerNorm,
// the softmax probabilities and the per-token losses. On the runner's part
// (n = B·T tokens, B·T/t with SP; C' = C/t, F = 4C/t, V' = ⌈V/t⌉, as in
// stashFloats):
//
//	(hi−lo+1)·nC + (hi−lo)·(3·nC + 4·n + 4·BTC' + 2·BTF + A) [+ nC + 2n + BTV' + BT]
//
// with A as in stashFloats (B·NH'·T², or B·NH'·T with flash); for t = 1
// and no recomputation, (hi−lo+1)·BTC + (hi−lo)·(15·BTC + 4·BT + A)
// [+ BTC + 2·BT + BTV + BT]; recomputation replaces the blocks' term by
// dims.layersFloats. NewStash's whole-model stash is the stage [0, L) with
// the head.
func (m *GPT) StageStashFloats(lo, hi int, head bool) int {
	c, d := m.cfg, m.d
	B, T, C := m.B, c.SeqLen, c.Hidden
	BT := B * T
	n := d.tokens(BT)
	blocks := hi - lo
	f := (blocks+1)*n*C + d.layersFloats(B, T, blocks)
	if head {
		f += n*C + 2*n + BT*d.Vl + BT
	}
	return f
}

// StageStashBytes is the size of one stage stash: its activations and the
// (B,T) input and target tokens (every stage records the batch: dropout
// is keyed by its step and position).
func (m *GPT) StageStashBytes(lo, hi int, head bool) int64 {
	return int64(m.StageStashFloats(lo, hi, head))*4 + 2*int64(m.B*m.cfg.SeqLen)*4
}

// BoundaryFloats is the size of the activation (and of its gradient) a
// pipeline stage sends to the next: one residual stream on the runner's
// part, B·T·C (B·T·C/t with sequence parallelism).
func (m *GPT) BoundaryFloats() int { return m.d.tokens(m.B*m.cfg.SeqLen) * m.cfg.Hidden }

// NewStageStash allocates the stash of a pipeline stage holding blocks
// [lo, hi) (tag act), on the runner's part: Residual(l) exists for
// lo ≤ l ≤ hi, block activations for lo ≤ l < hi, the head's only when
// head is set (then hi must be L). A stage receives its input into
// Residual(lo), runs BlockForward(l) for l in [lo, hi) (EmbedForward first
// when lo = 0, HeadForward last with the head) and sends Residual(hi).
func (m *GPT) NewStageStash(lo, hi int, head bool) (*Stash, error) {
	c := m.cfg
	if lo < 0 || hi > c.Layers || lo > hi || (head && hi != c.Layers) {
		return nil, fmt.Errorf("model: stage blocks [%d, %d) (head %v) do not fit layers=%d", lo, hi, head, c.Layers)
	}
	BT := m.B * c.SeqLen
	tokBytes := 2 * int64(BT) * 4
	if err := m.dev.Reserve(device.Act, tokBytes); err != nil {
		return nil, fmt.Errorf("model: stash tokens: %w", err)
	}
	buf, err := m.dev.Alloc(device.Act, m.StageStashFloats(lo, hi, head))
	if err != nil {
		m.dev.Release(device.Act, tokBytes)
		return nil, fmt.Errorf("model: stage stash: %w", err)
	}
	s := &Stash{buf: buf, dev: m.dev, tokBytes: tokBytes, inputs: make([]int32, BT), targets: make([]int32, BT)}
	m.carveStage(s, lo, hi, head)
	return s, nil
}

// ReshapeStageStash lays a free stage stash out again for blocks [lo, hi)
// (head as in NewStageStash), in place: a pipeline rank reuses the stash a
// micro-batch of one chunk has finished with for another chunk, so that it
// holds as many stashes as it has micro-batches in flight over all its
// chunks, not the sum of each chunk's peak. The stash's buffer must hold
// StageStashFloats(lo, hi, head) values.
func (m *GPT) ReshapeStageStash(s *Stash, lo, hi int, head bool) error {
	c := m.cfg
	if lo < 0 || hi > c.Layers || lo > hi || (head && hi != c.Layers) {
		return fmt.Errorf("model: stage blocks [%d, %d) (head %v) do not fit layers=%d", lo, hi, head, c.Layers)
	}
	if s.buf == nil {
		return fmt.Errorf("model: stash has been freed")
	}
	if need := m.StageStashFloats(lo, hi, head); need > len(s.buf.Data) {
		return fmt.Errorf("model: a stash of %d values cannot hold blocks [%d, %d) (head %v): %d values", len(s.buf.Data), lo, hi, head, need)
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

// carveStage points s's residuals lo..hi, blocks [lo, hi) and (with head)
// the head's activations into its buffer, and every other layer at nothing.
func (m *GPT) carveStage(s *Stash, lo, hi int, head bool) {
	c, d := m.cfg, m.d
	BT := m.B * c.SeqLen
	s.res, s.layers = make([][]float32, c.Layers+1), make([]layerActs, c.Layers)
	s.lnf, s.lnfM, s.lnfR, s.probs, s.losses = nil, nil, nil, nil, nil
	C := c.Hidden
	n := d.tokens(BT)
	nC := n * C
	data := s.buf.Data
	next := func(k int) []float32 {
		x := data[:k:k]
		data = data[k:]
		return x
	}
	for l := lo; l <= hi; l++ {
		s.res[l] = next(nC)
	}
	m.carveLayers(s, lo, hi, next)
	if head {
		s.lnf, s.lnfM, s.lnfR = next(nC), next(n), next(n)
		s.probs, s.losses = next(BT*d.Vl), next(BT)
	}
}

// HeadStash holds the head's activations of one micro-batch on the last
// pipeline stage — the final LayerNorm's output and statistics, the
// (vocab-parallel) probabilities and the per-token losses — apart from the
// blocks' stash, because they live only from HeadForward to HeadBackward:
// a pipeline keeps one per micro-batch between its last chunk's F and B.
type HeadStash struct {
	buf *device.Buffer
}

// HeadStashFloats is nC + 2n + BT·V' + BT (n = B·T, B·T/t with SP; V' =
// ⌈V/t⌉): what StageStashFloats adds for the head.
func (m *GPT) HeadStashFloats() int {
	BT := m.B * m.cfg.SeqLen
	n := m.d.tokens(BT)
	return n*m.cfg.Hidden + 2*n + BT*m.d.Vl + BT
}

// NewHeadStash allocates a head stash (tag act).
func (m *GPT) NewHeadStash() (*HeadStash, error) {
	buf, err := m.dev.Alloc(device.Act, m.HeadStashFloats())
	if err != nil {
		return nil, fmt.Errorf("model: head stash: %w", err)
	}
	return &HeadStash{buf: buf}, nil
}

// Free returns the memory. Freeing twice is a no-op.
func (h *HeadStash) Free() {
	if h.buf != nil {
		h.buf.Free()
		h.buf = nil
	}
}

// AttachHead lends h to s for the head's activations: s must be a stage
// stash whose blocks end at L, laid out without the head.
func (m *GPT) AttachHead(s *Stash, h *HeadStash) error {
	L := m.cfg.Layers
	if h.buf == nil || s.buf == nil || s.res[L] == nil {
		return fmt.Errorf("model: a head stash needs a live stage stash that ends at block %d", L)
	}
	BT := m.B * m.cfg.SeqLen
	n := m.d.tokens(BT)
	data := h.buf.Data
	next := func(k int) []float32 {
		x := data[:k:k]
		data = data[k:]
		return x
	}
	s.lnf, s.lnfM, s.lnfR = next(n*m.cfg.Hidden), next(n), next(n)
	s.probs, s.losses = next(BT*m.d.Vl), next(BT)
	return nil
}

// DetachHead takes the head's activations back from s.
func (m *GPT) DetachHead(s *Stash) {
	s.lnf, s.lnfM, s.lnfR, s.probs, s.losses = nil, nil, nil, nil, nil
}
