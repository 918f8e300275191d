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
		f += d.headFloats(BT)
	}
	return f
}

// StageStashHalves is the 16-bit part of a stage stash (see stash16.go):
// its blocks' layersHalves and, with the head, headHalves; 0 without a
// 16-bit stash.
func (m *GPT) StageStashHalves(lo, hi int, head bool) int {
	B, T := m.B, m.cfg.SeqLen
	h := m.d.layersHalves(B, T, hi-lo)
	if head {
		h += m.d.headHalves(B * T)
	}
	return h
}

// StageStashBytes is the size of one stage stash: its fp32 and 16-bit activations and the
// (B,T) input and target tokens (every stage records the batch: dropout
// is keyed by its step and position).
func (m *GPT) StageStashBytes(lo, hi int, head bool) int64 {
	return int64(m.StageStashFloats(lo, hi, head))*4 + int64(m.StageStashHalves(lo, hi, head))*2 + 2*int64(m.B*m.cfg.SeqLen)*4
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
	s, err := m.allocStash("stage stash", m.StageStashFloats(lo, hi, head), m.StageStashHalves(lo, hi, head))
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
	if need, have := m.StageStashHalves(lo, hi, head), s.halfCap(); need > have {
		return fmt.Errorf("model: a stash of %d 16-bit values cannot hold blocks [%d, %d) (head %v): %d values", have, lo, hi, head, need)
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

// halfCap is the number of 16-bit values the stash's buffer holds.
func (s *Stash) halfCap() int {
	if s.half == nil {
		return 0
	}
	return len(s.half.Bits)
}

// carveStage points s's residuals lo..hi, blocks [lo, hi) and (with head)
// the head's activations into its buffer, and every other layer at nothing.
func (m *GPT) carveStage(s *Stash, lo, hi int, head bool) {
	c, d := m.cfg, m.d
	s.res, s.layers = make([][]float32, c.Layers+1), make([]layerActs, c.Layers)
	m.DetachHead(s)
	nC := d.tokens(m.B*c.SeqLen) * c.Hidden
	cv := s.carver()
	for l := lo; l <= hi; l++ {
		s.res[l] = cv.f32(nC)
	}
	m.carveLayers(s, lo, hi, cv)
	if head {
		m.carveHead(s, cv)
	}
}

// HeadStash holds the head's activations of one micro-batch on the last
// pipeline stage — the final LayerNorm's output and statistics, the
// (vocab-parallel) probabilities and the per-token losses — apart from the
// blocks' stash, because they live only from HeadForward to HeadBackward:
// a pipeline keeps one per micro-batch between its last chunk's F and B.
type HeadStash struct {
	buf  *device.Buffer
	half *device.Buffer // lnf with a 16-bit stash
}

// HeadStashFloats is nC + 2n + BT·V' + BT (n = B·T, B·T/t with SP; V' =
// ⌈V/t⌉; 2n + BT·V' + BT with a 16-bit stash): what StageStashFloats adds
// for the head.
func (m *GPT) HeadStashFloats() int { return m.d.headFloats(m.B * m.cfg.SeqLen) }

// HeadStashBytes is a head stash's size: 4·HeadStashFloats, plus 2 bytes
// for each of lnf's nC values with a 16-bit stash.
func (m *GPT) HeadStashBytes() int64 {
	BT := m.B * m.cfg.SeqLen
	return 4*int64(m.d.headFloats(BT)) + 2*int64(m.d.headHalves(BT))
}

// NewHeadStash allocates a head stash (tag act).
func (m *GPT) NewHeadStash() (*HeadStash, error) {
	buf, err := m.dev.Alloc(device.Act, m.HeadStashFloats())
	if err != nil {
		return nil, fmt.Errorf("model: head stash: %w", err)
	}
	h := &HeadStash{buf: buf}
	if n := m.d.headHalves(m.B * m.cfg.SeqLen); n > 0 {
		if h.half, err = m.dev.AllocOf(device.Act, m.half.dt, n); err != nil {
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
		cv.h = h.half.Bits
	}
	m.carveHead(s, cv)
	return nil
}

// DetachHead takes the head's activations back from s.
func (m *GPT) DetachHead(s *Stash) {
	s.lnf, s.lnfh, s.lnfM, s.lnfR, s.probs, s.losses = nil, nil, nil, nil, nil, nil
}
