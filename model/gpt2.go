package model

import "trellis/tensor"

// block is an architecture's transformer block (gpt2, llama), run by the
// passes: its forward, its backward (whole, or with d the input half of a
// split one) and a split backward's deferred weight-gradient half, on the
// block's weights and gradients cut from its unit.
type block interface {
	forward(m *GPT, s *Stash, w blockWeights, l int) error
	backward(m *GPT, s *Stash, w blockWeights, g blockGrads, d *deferred, l int) error
	weightGrads(m *GPT, s *Stash, g blockGrads, d *deferred, l int) error
}

// newBlock is the runner's architecture's block.
func newBlock(d dims) block {
	if d.llama {
		return newLlama(d)
	}
	return newGPT2(d)
}

// gpt2 is the GPT-2 block (arch's GPT-2), pre-LN, written once for every
// precision, tensor-parallel split and form of the backward pass:
//
//	z = LN₁(x);  res2 = x + drop(Attn(z))
//	z = LN₂(res2);  out = res2 + drop(MLP(z))
type gpt2 struct {
	ln1, ln2 norm
	attn     attention
	mlp      mlp
}

func newGPT2(d dims) gpt2 { return gpt2{attn: newAttention(d), mlp: newMLP(d)} }

// blockActs are one block's saved activations (arch.Config.BlockSaved).
type blockActs struct {
	ln1, ln2 normActs
	attn     attnActs
	res2     []float32 // (n,C) the residual stream between the branches
	mlp      mlpActs
	moe      moeActs // an MoE block's, in mlp's place
}

// blockWeights are one block's weights, cut from its unit in Layout order
// (a Llama's leave the biases nil).
type blockWeights struct {
	ln1w, ln1b, ln2w, ln2b []float32
	attn                   attnWeights
	mlp                    mlpWeights
	moe                    moeWeights
}

// blockGrads are one block's gradient buffers.
type blockGrads struct {
	ln1w, ln1b, ln2w, ln2b []float32
	attn                   attnGrads
	mlp                    mlpGrads
	moe                    moeGrads
}

// blockWeights views a block unit's weights (vectors widened into the
// vector scratch under a 16-bit policy).
func (m *GPT) blockWeights(u Unit, w tensor.Buf) blockWeights {
	if m.d.llama {
		return m.llamaWeights(u, w)
	}
	t, v := tensorsOf(u, w), m.vecs()
	return blockWeights{
		ln1w: v.of(t[0]), ln1b: v.of(t[1]),
		attn: attnWeights{qkvw: t[2], qkvb: v.of(t[3]), projw: t[4], projb: v.of(t[5])},
		ln2w: v.of(t[6]), ln2b: v.of(t[7]),
		mlp: mlpWeights{fcw: t[8], fcb: v.of(t[9]), projw: t[10], projb: v.of(t[11])},
	}
}

// blockGradsOf views a block unit's gradient buffer.
func (m *GPT) blockGradsOf(u Unit, g []float32) blockGrads {
	if m.d.llama {
		return m.llamaGrads(u, g)
	}
	t := gradsOf(u, g)
	return blockGrads{
		ln1w: t[0], ln1b: t[1],
		attn: attnGrads{qkvw: t[2], qkvb: t[3], projw: t[4], projb: t[5]},
		ln2w: t[6], ln2b: t[7],
		mlp: mlpGrads{fcw: t[8], fcb: t[9], projw: t[10], projb: t[11]},
	}
}

// forward runs block l from Residual(l) to Residual(l+1).
func (b gpt2) forward(m *GPT, s *Stash, w blockWeights, l int) error {
	a := &s.blocks[l]
	n := m.d.tokens(s.b * s.t)
	x, out := s.res[l], s.res[l+1]
	z := b.ln1.forward(m, a.ln1, x, w.ln1w, w.ln1b, n)
	if err := b.attn.forward(m, s, a.attn, a.res2, x, z, w.attn, m.drop.attn[l]); err != nil {
		return err
	}
	z = b.ln2.forward(m, a.ln2, a.res2, w.ln2w, w.ln2b, n)
	return b.mlp.forward(m, s, a.mlp, out, a.res2, z, w.mlp, m.drop.mlp[l])
}

// backward backpropagates DResidual (the gradient with respect to
// Residual(l+1)) through block l, leaving the gradient with respect to
// Residual(l) in DResidual and ACCUMULATING the parameter gradients; with
// a split backward (d non-nil) the linears' weight gradients are left to
// weightGrads. dres is updated in place: d(out) becomes d(res2) when LN₂'s
// input gradient is added to it, then d(x).
func (b gpt2) backward(m *GPT, s *Stash, w blockWeights, g blockGrads, d *deferred, l int) error {
	a := &s.blocks[l]
	n := m.d.tokens(s.b * s.t)
	dres := m.w.dres[:n*m.d.C]
	dz, err := b.mlp.backward(m, s, a.mlp, m.branchGrad(s, m.drop.mlp[l]), a.ln2.out, w.mlp, g.mlp, d)
	if err != nil {
		return err
	}
	if err := b.ln2.backward(m, dres, g.ln2w, g.ln2b, dz, a.res2, w.ln2w, a.ln2, n); err != nil {
		return err
	}
	if dz, err = b.attn.backward(m, s, a.attn, m.branchGrad(s, m.drop.attn[l]), a.ln1.out, w.attn, g.attn, d); err != nil {
		return err
	}
	return b.ln1.backward(m, dres, g.ln1w, g.ln1b, dz, s.res[l], w.ln1w, a.ln1, n)
}

// weightGrads is a split backward's deferred half for block l: the four
// linears' weight gradients, dW += dYᵀ·X, from the output gradients d
// saved by backward and the inputs in the stash.
func (b gpt2) weightGrads(m *GPT, s *Stash, g blockGrads, d *deferred, l int) error {
	a := &s.blocks[l]
	if err := b.mlp.weightGrads(m, s, a.mlp, a.ln2.out, g.mlp, d); err != nil {
		return err
	}
	return b.attn.weightGrads(m, s, a.attn, a.ln1.out, g.attn, d)
}
