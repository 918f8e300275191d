package model

import "trellis/tensor"

// llama is the Llama block (arch's Llama), pre-norm, written once for
// every precision, tensor-parallel split and form of the backward pass:
//
//	z = RMS₁(x);  res2 = x + drop(Attn(z))       RoPE on q, k; grouped-query attention
//	z = RMS₂(res2);  out = res2 + drop(SwiGLU(z))
//
// It is GPT-2's block (gpt2.go) with RMSNorm for LayerNorm, SwiGLU for the
// GELU MLP, no biases, and the attention layer's RoPE and shared
// key/value heads.
//
// An MoE block (arch's MoELayer) runs the MoE layer (moe.go) in the
// SwiGLU's place: out = res2 + drop(MoE(z)).
type llama struct {
	ln1, ln2 norm
	attn     attention
	mlp      swiglu
	moe      moeLayer
}

func newLlama(d dims) llama {
	n := norm{rms: true, eps: d.eps}
	return llama{ln1: n, ln2: n, attn: newAttention(d), mlp: newSwiGLU(d), moe: d.moe}
}

// forward runs block l from Residual(l) to Residual(l+1).
func (b llama) forward(m *GPT, s *Stash, w blockWeights, l int) error {
	a := &s.blocks[l]
	n := m.d.tokens(s.b * s.t)
	x, out := s.res[l], s.res[l+1]
	z := b.ln1.forward(m, a.ln1, x, w.ln1w, nil, n)
	if err := b.attn.forward(m, s, a.attn, a.res2, x, z, w.attn, m.drop.attn[l]); err != nil {
		return err
	}
	z = b.ln2.forward(m, a.ln2, a.res2, w.ln2w, nil, n)
	if m.cfg.MoELayer(l) {
		return b.moe.forward(m, s, a.moe, out, a.res2, z, w.moe, m.drop.mlp[l], l)
	}
	return b.mlp.forward(m, s, a.mlp, out, a.res2, z, w.mlp, m.drop.mlp[l])
}

// backward backpropagates DResidual through block l (as gpt2.backward:
// DResidual becomes the gradient with respect to Residual(l), the
// parameter gradients ACCUMULATE, a split backward leaves the four GEMMs'
// weight gradients to weightGrads).
func (b llama) backward(m *GPT, s *Stash, w blockWeights, g blockGrads, d *deferred, l int) error {
	a := &s.blocks[l]
	n := m.d.tokens(s.b * s.t)
	dres := m.w.dres[:n*m.d.C]
	var dz []float32
	var err error
	if m.cfg.MoELayer(l) {
		if dz, err = b.moe.backward(m, s, a.moe, m.branchGrad(s, m.drop.mlp[l]), a.ln2.out, w.moe, g.moe, l); err != nil {
			return err
		}
	} else if dz, err = b.mlp.backward(m, s, a.mlp, m.branchGrad(s, m.drop.mlp[l]), a.ln2.out, w.mlp, g.mlp, d); err != nil {
		return err
	}
	if err := b.ln2.backward(m, dres, g.ln2w, nil, dz, a.res2, w.ln2w, a.ln2, n); err != nil {
		return err
	}
	if dz, err = b.attn.backward(m, s, a.attn, m.branchGrad(s, m.drop.attn[l]), a.ln1.out, w.attn, g.attn, d); err != nil {
		return err
	}
	return b.ln1.backward(m, dres, g.ln1w, nil, dz, s.res[l], w.ln1w, a.ln1, n)
}

// weightGrads is a split backward's deferred half for block l: the
// qkv, o, gate-up and down GEMMs' weight gradients (an MoE block's MLP
// computed its own in the input half).
func (b llama) weightGrads(m *GPT, s *Stash, g blockGrads, d *deferred, l int) error {
	a := &s.blocks[l]
	if !m.cfg.MoELayer(l) {
		if err := b.mlp.weightGrads(m, s, a.mlp, a.ln2.out, g.mlp, d); err != nil {
			return err
		}
	}
	return b.attn.weightGrads(m, s, a.attn, a.ln1.out, g.attn, d)
}

// Tensors of a Llama block unit, in arch's order.
const (
	llInNorm = iota
	llQ
	llK
	llV
	llO
	llPostNorm
	llGate
	llUp
	llDown
)

// The MLP tensors of an MoE block unit, after llPostNorm (arch's moeParams).
const (
	moeRouter = llPostNorm + 1 + iota
	moeGU
	moeDown
	moeSharedGate
	moeSharedUp
	moeSharedDown
)

// llamaWeights views a Llama block unit's weights: q, k, v as one
// ((NH'+2·NKV')·HS, C) matrix and gate, up as one (2F', C), spans of the
// unit's buffer (they lie back to back); the norm gains widened under a
// 16-bit policy.
func (m *GPT) llamaWeights(u Unit, w tensor.Buf) blockWeights {
	t, v := tensorsOf(u, w), m.vecs()
	bw := blockWeights{
		ln1w: v.of(t[llInNorm]), ln2w: v.of(t[llPostNorm]),
		attn: attnWeights{qkvw: span(u, w, llQ, llV), projw: t[llO]},
	}
	if !m.cfg.MoELayer(u.Index - 1) {
		bw.mlp = mlpWeights{fcw: span(u, w, llGate, llUp), projw: t[llDown]}
		return bw
	}
	bw.moe = moeWeights{router: t[moeRouter], gu: t[moeGU], down: t[moeDown]}
	if len(t) > moeSharedDown {
		bw.moe.sgu, bw.moe.sdown = span(u, w, moeSharedGate, moeSharedUp), t[moeSharedDown]
	}
	return bw
}

// llamaGrads views a Llama block unit's gradient buffer as llamaWeights
// views its weights.
func (m *GPT) llamaGrads(u Unit, g []float32) blockGrads {
	t := gradsOf(u, g)
	bg := blockGrads{
		ln1w: t[llInNorm], ln2w: t[llPostNorm],
		attn: attnGrads{qkvw: spanF(u, g, llQ, llV), projw: t[llO]},
	}
	if !m.cfg.MoELayer(u.Index - 1) {
		bg.mlp = mlpGrads{fcw: spanF(u, g, llGate, llUp), projw: t[llDown]}
		return bg
	}
	bg.moe = moeGrads{router: t[moeRouter], gu: t[moeGU], down: t[moeDown]}
	if len(t) > moeSharedDown {
		bg.moe.sgu, bg.moe.sdown = spanF(u, g, moeSharedGate, moeSharedUp), t[moeSharedDown]
	}
	return bg
}

// span is tensors i..j of unit u (consecutive in its layout) as one
// buffer of w, the unit's weights.
func span(u Unit, w tensor.Buf, i, j int) tensor.Buf {
	lo, hi := u.Tensors[i].Offset-u.Offset, u.Tensors[j].Offset-u.Offset+u.Tensors[j].Size
	return w.Slice(lo, hi)
}

// spanF is span of a gradient buffer.
func spanF(u Unit, g []float32, i, j int) []float32 {
	lo, hi := u.Tensors[i].Offset-u.Offset, u.Tensors[j].Offset-u.Offset+u.Tensors[j].Size
	return g[lo:hi:hi]
}

// carveLlama carves one Llama block's activations (arch's
// llamaBlockSaved); probs, when not nil, is the attention-core buffer the
// stash's blocks share (selective recomputation).
func (m *GPT) carveLlama(cv *carver, probs []float32, l int) blockActs {
	t := cv.saved(m.declared(probs != nil, l))
	att := probs
	if att == nil {
		name := "self_attn.probs"
		if m.d.flash {
			name = "self_attn.lse"
		}
		att = get(t, name).F32()
	}
	b := blockActs{
		ln1:  normActs{out: get(t, "input_layernorm.out"), rstd: get(t, "input_layernorm.rstd").F32()},
		attn: attnActs{qkv: get(t, "self_attn.qkv"), out: get(t, "self_attn.out"), att: att},
		res2: get(t, "res2").F32(),
		ln2:  normActs{out: get(t, "post_attention_layernorm.out"), rstd: get(t, "post_attention_layernorm.rstd").F32()},
	}
	if !m.cfg.MoELayer(l) {
		b.mlp = mlpActs{fc: get(t, "mlp.gate_up"), fcg: get(t, "mlp.act")}
		return b
	}
	b.moe = moeActs{probs: get(t, "mlp.router.probs").F32(), x: get(t, "mlp.experts.x"), gu: get(t, "mlp.experts.gate_up"),
		act: get(t, "mlp.experts.act"), y: get(t, "mlp.experts.y").F32()}
	if m.cfg.SharedWidth() > 0 {
		b.moe.sgu, b.moe.sact = get(t, "mlp.shared.gate_up"), get(t, "mlp.shared.act")
	}
	return b
}
