package model

import (
	"fmt"

	"trellis/device"
	"trellis/ops"
)

// WeightStash holds, between a block's split backward passes, the output
// gradients of its four linears, from which the weight gradients are
// computed later (zero-bubble pipeline schedules defer them to fill the
// bubble; Qi et al. 2023). Per block, (B,T,·): fc2 C, fc 4C, proj C,
// qkv 3C — 9·B·T·C floats, tag act.
type WeightStash struct {
	buf    *device.Buffer
	lo, hi int
	douts  []blockDouts // (hi−lo)
}

type blockDouts struct {
	fc2, fc, proj, qkv []float32 // (B,T,C), (B,T,4C), (B,T,C), (B,T,3C)
}

// WeightStashFloats is the size of a WeightStash for blocks [lo, hi).
func (m *GPT) WeightStashFloats(lo, hi int) int {
	return (hi - lo) * 9 * m.B * m.cfg.SeqLen * m.cfg.Hidden
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
	BTC := m.B * m.cfg.SeqLen * m.cfg.Hidden
	data := buf.Data
	next := func(n int) []float32 {
		x := data[:n:n]
		data = data[n:]
		return x
	}
	for l := lo; l < hi; l++ {
		w.douts = append(w.douts, blockDouts{fc2: next(BTC), fc: next(4 * BTC), proj: next(BTC), qkv: next(3 * BTC)})
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

func (w *WeightStash) of(l int) (*blockDouts, error) {
	if w.buf == nil || l < w.lo || l >= w.hi {
		return nil, fmt.Errorf("model: block %d is not in the weight stash [%d, %d)", l, w.lo, w.hi)
	}
	return &w.douts[l-w.lo], nil
}

// BlockBackwardInput is BlockBackward without the four linears' weight
// gradients: it backpropagates DResidual through block l, accumulating the
// biases' and LayerNorms' gradients, and saves each linear's output
// gradient dY in w for BlockBackwardWeight. It does not call GradsDone.
func (m *GPT) BlockBackwardInput(p Params, s *Stash, w *WeightStash, l int) error {
	defer m.pin()()
	if m.part.Split() {
		return fmt.Errorf("model: tp=%d: the split backward (BlockBackwardInput) is not tensor-parallel", m.part.Degree())
	}
	d, err := w.of(l)
	if err != nil {
		return err
	}
	u := l + 1
	wt, err := m.weights(p, u, false)
	if err != nil {
		return err
	}
	defer m.release(p, u)
	g, err := grads(p, u)
	if err != nil {
		return err
	}
	if err := m.recompute(wt, s, l); err != nil {
		return err
	}
	if m.d.half {
		m.blockBackwardInputHalf(wt, g, s, d, l)
		return nil
	}
	c, k := m.cfg, m.k
	B, T, C := s.b, s.t, c.Hidden
	BT, BTC := B*T, B*T*C
	v, dv, a := viewBlock(wt, C), viewBlock(g, C), &s.layers[l]

	// MLP branch, as BlockBackward, the output gradients kept.
	dfcg := m.big[:4*BTC]
	copy(d.fc2, m.branchGrad(s, m.drop.mlp[l]))
	m.linearInputGrad(dfcg, d.fc2, v.fc2w, BT, 4*C, C)
	ops.BiasBackward(k, dv.fc2b, d.fc2, BT, C)
	ops.GELUBackwardSet(k, d.fc, a.fc, dfcg, BT*4*C)
	m.linearInputGrad(m.dln, d.fc, v.fcw, BT, C, 4*C)
	ops.BiasBackward(k, dv.fcb, d.fc, BT, 4*C)
	ops.LayerNormBackward(k, m.dres, dv.ln2w, dv.ln2b, m.dln, a.res2, v.ln2w, a.ln2M, a.ln2R, BT, C)

	// Attention branch.
	datty := m.big[4*BTC : 5*BTC]
	copy(d.proj, m.branchGrad(s, m.drop.attn[l]))
	m.linearInputGrad(datty, d.proj, v.projw, BT, C, C)
	ops.BiasBackward(k, dv.projb, d.proj, BT, C)
	m.attnBackward(d.qkv, datty, a, B, T, C, c.Heads)
	m.linearInputGrad(m.dln, d.qkv, v.qkvw, BT, C, 3*C)
	ops.BiasBackward(k, dv.qkvb, d.qkv, BT, 3*C)
	ops.LayerNormBackward(k, m.dres, dv.ln1w, dv.ln1b, m.dln, s.res[l], v.ln1w, a.ln1M, a.ln1R, BT, C)
	return nil
}

// BlockBackwardWeight accumulates block l's four linear weight gradients
// from the output gradients BlockBackwardInput saved and the inputs in s,
//
//	dW += dYᵀ·X     (fc2: X = GELU(fc); fc: LN₂; proj: atty; qkv: LN₁)
//
// then calls GradsDone(l+1). With full recomputation it reruns block l's
// forward first (other blocks' backward passes overwrote the shared
// activations since BlockBackwardInput). Together the two give BlockBackward's
// gradients bit for bit.
func (m *GPT) BlockBackwardWeight(p Params, s *Stash, w *WeightStash, l int) error {
	defer m.pin()()
	d, err := w.of(l)
	if err != nil {
		return err
	}
	u := l + 1
	if err := m.recomputeForWeights(p, s, l); err != nil {
		return err
	}
	g, err := grads(p, u)
	if err != nil {
		return err
	}
	if m.d.half {
		m.blockBackwardWeightHalf(g, s, d, l)
		return gradsDone(p, u)
	}
	C := m.cfg.Hidden
	BT := s.b * s.t
	dv, a := viewBlock(g, C), &s.layers[l]
	m.linearWeightGrad(dv.fc2w, d.fc2, a.fcg, BT, 4*C, C)
	m.linearWeightGrad(dv.fcw, d.fc, a.ln2, BT, C, 4*C)
	m.linearWeightGrad(dv.projw, d.proj, a.atty, BT, C, C)
	m.linearWeightGrad(dv.qkvw, d.qkv, a.ln1, BT, C, 3*C)
	return gradsDone(p, u)
}
