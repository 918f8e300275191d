package model

import (
	"trellis/rng"
	"trellis/tensor"
)

// attention is causal self-attention on the rank's NH' = NH/t query heads
// and NKV' = NKV/t key/value heads (Megatron's split by heads: the qkv
// projection column-parallel, the output projection row-parallel):
//
//	qkv = f(x)·W_qkvᵀ + b                 (B,T,C'+2·KV'), [q | k | v]
//	q, k = RoPE(q), RoPE(k)               a Llama's rotary positions
//	out = softmax(q·kᵀ/√d + causal mask)·v (B,T,C'), query head h on key/value head ⌊h·NKV/NH⌋
//	res + drop(g(out·W_projᵀ) + b)
//
// GPT-2's is multi-head (NKV = NH) with biases and no RoPE; a Llama's has
// no biases, its q, k, v weights three tensors that lie back to back in
// the unit, so one GEMM computes them. RoPE runs once, in the forward,
// on the fresh qkv (in fp32, before a 16-bit stash rounds it): the stash
// keeps the rotated q and k, so neither the backward nor a selective
// recomputation of the core rotates again, and the backward rotates the
// core's dq, dk back (ops.RoPEBackward) before the projection's.
//
// The core saves its input qkv and output (arch's Operand) and the
// softmax probabilities (B,NH',T,T) — or with flash (Dao et al. 2022)
// only the per-row log-sum-exps (B,NH',T), from which the backward
// recomputes the probabilities block by block. Under selective
// recomputation the probabilities of every layer share one buffer and
// the backward reruns the core first.
type attention struct {
	qkv, proj linear
}

// attnActs are the attention layer's saved activations.
type attnActs struct {
	qkv, out tensor.Buf
	att      []float32 // probabilities or log-sum-exps
}

func newAttention(d dims) attention {
	return attention{qkv: linear{in: d.C, out: d.qkvW(), site: siteAttnIn}, proj: linear{row: true, in: d.Cl, out: d.C, site: siteAttnOut}}
}

// attnWeights are the layer's weights: matrices in the compute dtype,
// biases in fp32 (nil: none).
type attnWeights struct {
	qkvw, projw tensor.Buf
	qkvb, projb []float32
}

// attnGrads are the layer's parameter gradients.
type attnGrads struct{ qkvw, qkvb, projw, projb []float32 }

// forward is res2 = x + drop(Attn(z)) for the norm output z (the rank's
// tokens) and the block input x. A 16-bit forward's fp32 values live in
// big: qkv [0, W), the core's output [W, W+X) (W = B·T·(C'+2·KV'),
// X = B·T·C').
func (l attention) forward(m *GPT, s *Stash, a attnActs, res2, x []float32, z tensor.Buf, w attnWeights, site rng.Stream) error {
	bt := s.b * s.t
	X, W := bt*m.d.Cl, bt*m.d.qkvW()
	qkv := m.out(a.qkv, m.w.big, W)
	if err := l.qkv.forward(m, qkv, z, w.qkvw, w.qkvb, bt); err != nil {
		return err
	}
	if m.d.llama {
		m.k.RoPEForward(qkv, m.w.cos, m.w.sin, s.b, s.t, m.d.NH, m.d.KV, m.d.HS)
	}
	m.keep(a.qkv, qkv, true)
	o := m.out(a.out, m.w.big[W:], X)
	if err := m.core(o, a.att, qkv, s.b, s.t); err != nil {
		return err
	}
	m.keep(a.out, o, false)
	return l.proj.residual(m, s, res2, x, a.out, w.projw, w.projb, site)
}

// core runs the attention core of one layer: out = softmax(QKᵀ/√d)·V from
// qkv (B,T,C'+2·KV'), keeping in att the probabilities or log-sum-exps;
// under cp the ring's (ring.go), over the group.
func (m *GPT) core(out, att, qkv []float32, B, T int) error {
	d := m.d
	switch {
	case m.cp != nil:
		return m.ringForward(out, att, qkv, B)
	case d.flash:
		m.k.FlashAttentionForward(out, att, qkv, B, T, d.Cl, d.NH, d.KV)
	default:
		m.k.AttentionForward(out, att, qkv, B, T, d.Cl, d.NH, d.KV)
	}
	return nil
}

// backward backpropagates dy, the gradient of the branch output before
// dropout (the rank's tokens), through the projection and the core down
// to the norm output z: it returns the rank's tokens of z's gradient.
// The scratch is big's: dqkv [0, W), the core's output [W, W+X), datty
// [W+X, W+2X), qkv widened [W+2X, 2W+2X) (GPT-2: W = 3X). With a split
// backward (d non-nil) the two linears' output gradients go to d and
// their weight gradients are left to weightGrads.
func (l attention) backward(m *GPT, s *Stash, a attnActs, dy []float32, z tensor.Buf, w attnWeights, g attnGrads, d *deferred) ([]float32, error) {
	bt := s.b * s.t
	X, W := bt*m.d.Cl, bt*m.d.qkvW()
	big := m.w.big
	dqkv, o, datty, q := big[:W], big[W:W+X], big[W+X:W+2*X], big[W+2*X:2*W+2*X]
	full, err := m.leaveBack(dy, bt)
	if err != nil {
		return nil, err
	}
	if d != nil {
		copy(d.proj, full)
		full, dqkv = d.proj, d.qkv
	}
	l.proj.backward(m, datty, full, a.out, w.projw, linGrads{w: g.projw, b: g.projb, defer_: d != nil}, bt)
	qv := m.vals(a.qkv, q, W)
	var ov []float32
	switch {
	case m.d.sharesProbs():
		ov = o
		if err := m.core(ov, a.att, qv, s.b, s.t); err != nil {
			return nil, err
		}
	case m.d.flash:
		ov = m.vals(a.out, o, X)
	}
	if err := m.coreBackward(dqkv, datty, qv, ov, a.att, s.b, s.t); err != nil {
		return nil, err
	}
	if m.d.llama {
		m.k.RoPEBackward(dqkv, m.w.cos, m.w.sin, s.b, s.t, m.d.NH, m.d.KV, m.d.HS)
	}
	return l.qkv.backwardCol(m, dqkv, z, w.qkvw, linGrads{w: g.qkvw, b: g.qkvb, defer_: d != nil}, bt)
}

// coreBackward SETS dqkv (B,T,C'+2·KV') to the gradient of the attention
// core given datty; flash recomputes the probabilities from the output
// and log-sum-exps (out is read by flash only).
func (m *GPT) coreBackward(dqkv, datty, qkv, out, att []float32, B, T int) error {
	d := m.d
	switch {
	case m.cp != nil:
		return m.ringBackward(dqkv, datty, qkv, out, att, B)
	case d.flash:
		clear(dqkv)
		m.k.FlashAttentionBackward(dqkv, datty, qkv, out, att, B, T, d.Cl, d.NH, d.KV)
	default:
		m.k.AttentionBackwardSet(dqkv, m.w.scratch, datty, qkv, att, B, T, d.Cl, d.NH, d.KV)
	}
	return nil
}

// weightGrads is a split backward's deferred half: the two linears'
// weight gradients from the output gradients d saved and the inputs in
// the stash (z the rank's tokens of the norm output).
func (l attention) weightGrads(m *GPT, s *Stash, a attnActs, z tensor.Buf, g attnGrads, d *deferred) error {
	bt := s.b * s.t
	l.proj.weightGrad(m, g.projw, m.rounded(d.proj), a.out, bt)
	return l.qkv.weightGradCol(m, g.qkvw, d.qkv, z, bt)
}
