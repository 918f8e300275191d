package model

import (
	"trellis/rng"
	"trellis/tensor"
)

// mlp is GPT-2's MLP on the rank's F = 4C/t inner columns (c_fc
// column-parallel, c_proj row-parallel):
//
//	fc = f(x)·W_fcᵀ + b     fcg = GELU(fc)     res + drop(g(fcg·W_projᵀ) + b)
//
// It saves fc (GELU's input) and fcg (c_proj's), arch's Operand class.
type mlp struct {
	fc, proj linear
}

// mlpActs are the MLP's saved activations.
type mlpActs struct{ fc, fcg tensor.Buf }

func newMLP(d dims) mlp {
	return mlp{fc: linear{in: d.C, out: d.F, site: siteMLPIn}, proj: linear{row: true, in: d.F, out: d.C, site: siteMLPOut}}
}

// mlpWeights are the layer's weights: matrices in the compute dtype,
// biases in fp32.
type mlpWeights struct {
	fcw, projw tensor.Buf
	fcb, projb []float32
}

// mlpGrads are the layer's parameter gradients.
type mlpGrads struct{ fcw, fcb, projw, projb []float32 }

// forward is out = res + drop(MLP(z)) for the norm output z (the rank's
// tokens). A 16-bit forward's fc and GELU(fc) are computed in place in
// big[:B·T·F].
func (l mlp) forward(m *GPT, s *Stash, a mlpActs, out, res []float32, z tensor.Buf, w mlpWeights, site rng.Stream) error {
	bt := s.b * s.t
	fc := m.out(a.fc, m.w.big, bt*m.d.F)
	if err := l.fc.forward(m, fc, z, w.fcw, w.fcb, bt); err != nil {
		return err
	}
	m.keep(a.fc, fc, true)
	fcg := m.out(a.fcg, fc, bt*m.d.F) // in place when 16-bit
	m.k.GELUForward(fcg, fc, bt*m.d.F)
	m.keep(a.fcg, fcg, false)
	return l.proj.residual(m, s, out, res, a.fcg, w.projw, w.projb, site)
}

// backward backpropagates dy, the gradient of the branch output before
// dropout (the rank's tokens), down to the norm output z: it returns the
// rank's tokens of z's gradient. Scratch: dfcg = big[:B·T·F], dfc =
// big[B·T·F:2·B·T·F] (fc widened into it under 16-bit, then GELU's
// gradient in place). With a split backward (d non-nil) the two linears'
// output gradients go to d and their weight gradients are left to
// weightGrads.
func (l mlp) backward(m *GPT, s *Stash, a mlpActs, dy []float32, z tensor.Buf, w mlpWeights, g mlpGrads, d *deferred) ([]float32, error) {
	bt := s.b * s.t
	n := bt * m.d.F
	dfcg, dfc := m.w.big[:n], m.w.big[n:2*n]
	full, err := m.leaveBack(dy, bt)
	if err != nil {
		return nil, err
	}
	if d != nil {
		copy(d.fc2, full)
		full, dfc = d.fc2, d.fc
	}
	l.proj.backward(m, dfcg, full, a.fcg, w.projw, linGrads{w: g.projw, b: g.projb, defer_: d != nil}, bt)
	fc := m.vals(a.fc, dfc, n)
	m.k.GELUBackwardSet(dfc, fc, dfcg, n) // element-wise: in place when fc is dfc
	return l.fc.backwardCol(m, dfc, z, w.fcw, linGrads{w: g.fcw, b: g.fcb, defer_: d != nil}, bt)
}

// weightGrads is a split backward's deferred half: the two linears'
// weight gradients from the output gradients d saved.
func (l mlp) weightGrads(m *GPT, s *Stash, a mlpActs, z tensor.Buf, g mlpGrads, d *deferred) error {
	bt := s.b * s.t
	l.proj.weightGrad(m, g.projw, m.rounded(d.fc2), a.fcg, bt)
	return l.fc.weightGradCol(m, g.fcw, d.fc, z, bt)
}
