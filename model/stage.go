package model

import (
	"fmt"

	"trellis/device"
)

// StageStashFloats is the number of fp32 values a pipeline stage holding
// blocks [lo, hi) keeps per micro-batch: its residual streams lo..hi, its
// blocks' activations and, for the last stage (head), the final LayerNorm,
// the softmax probabilities and the per-token losses:
//
//	(hi−lo+1)·BTC + (hi−lo)·(15·BTC + 4·BT + A) [+ BTC + 2·BT + BTV + BT]
//
// with A as in stashFloats (B·NH·T², or B·NH·T with flash); recomputation
// replaces the (hi−lo)·(…) term by dims.layersFloats. NewStash's
// whole-model stash is the stage [0, L) with the head.
func (m *GPT) StageStashFloats(lo, hi int, head bool) int {
	c := m.cfg
	B, T, C := m.B, c.SeqLen, c.Hidden
	BT, BTC := B*T, B*T*C
	n := hi - lo
	f := (n+1)*BTC + m.d.layersFloats(B, T, n)
	if head {
		f += BTC + 2*BT + BT*c.Vocab + BT
	}
	return f
}

// StageStashBytes is the size of one stage stash: its activations and the
// (B,T) input and target tokens (every stage records the batch: dropout
// is keyed by its step and position).
func (m *GPT) StageStashBytes(lo, hi int, head bool) int64 {
	return int64(m.StageStashFloats(lo, hi, head))*4 + 2*int64(m.B*m.cfg.SeqLen)*4
}

// NewStageStash allocates the stash of a pipeline stage holding blocks
// [lo, hi) (tag act): Residual(l) exists for lo ≤ l ≤ hi, block
// activations for lo ≤ l < hi, the head's only when head is set (then hi
// must be L). A stage receives its input into Residual(lo), runs
// BlockForward(l) for l in [lo, hi) (EmbedForward first when lo = 0,
// HeadForward last with the head) and sends Residual(hi).
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
	s := &Stash{buf: buf, dev: m.dev, tokBytes: tokBytes, inputs: make([]int32, BT), targets: make([]int32, BT),
		res: make([][]float32, c.Layers+1), layers: make([]layerActs, c.Layers)}
	BTC := BT * c.Hidden
	data := buf.Data
	next := func(n int) []float32 {
		x := data[:n:n]
		data = data[n:]
		return x
	}
	for l := lo; l <= hi; l++ {
		s.res[l] = next(BTC)
	}
	m.carveLayers(s, lo, hi, next)
	if head {
		s.lnf, s.lnfM, s.lnfR = next(BTC), next(BT), next(BT)
		s.probs, s.losses = next(BT*c.Vocab), next(BT)
	}
	return s, nil
}
