package model

import (
	"trellis/rng"
	"trellis/tensor"
)

// swiglu is a Llama's MLP on the rank's F' = F/t SwiGLU columns (gate and
// up column-parallel, down row-parallel; no biases):
//
//	gu = f(x)·[W_gate; W_up]ᵀ         (B,T,2F'), rows [gate | up]
//	act = SiLU(gate)⊙up               (B,T,F')
//	res + drop(g(act·W_downᵀ))
//
// Gate and up are two tensors in Hugging Face's names (and two
// column-parallel weights, each split by rows) that lie back to back in
// the unit: on every rank their parts form one (2F', C) matrix, so they
// are ONE column-parallel GEMM with one f (its input gathered once under
// sequence parallelism, one input-gradient reduction), and SwiGLU reads
// its rows as [gate | up]. It saves gu (SwiGLU's input) and act
// (down_proj's), arch's Operand class, as GPT-2's MLP saves fc and GELU(fc).
type swiglu struct {
	gu, down linear
}

func newSwiGLU(d dims) swiglu {
	return swiglu{gu: linear{in: d.C, out: 2 * d.F, site: siteMLPIn}, down: linear{row: true, in: d.F, out: d.C, site: siteMLPOut}}
}

// forward is out = res + drop(SwiGLU(z)) for the norm output z (the
// rank's tokens). A 16-bit forward computes gu in big[:2·B·T·F'] and act
// in big[2·B·T·F':3·B·T·F'].
func (l swiglu) forward(m *GPT, s *Stash, a mlpActs, out, res []float32, z tensor.Buf, w mlpWeights, site rng.Stream) error {
	bt := s.b * s.t
	n := bt * m.d.F
	gu := m.out(a.fc, m.w.big, 2*n)
	if err := l.gu.forward(m, gu, z, w.fcw, nil, bt); err != nil {
		return err
	}
	m.keep(a.fc, gu, true)
	act := m.out(a.fcg, m.w.big[2*n:], n)
	m.k.SwiGLUForward(act, gu, bt, m.d.F)
	m.keep(a.fcg, act, false)
	return l.down.residual(m, s, out, res, a.fcg, w.projw, nil, site)
}

// backward backpropagates dy, the gradient of the branch output before
// dropout (the rank's tokens), down to the norm output z: it returns the
// rank's tokens of z's gradient. Scratch: dact = big[:B·T·F'], dgu =
// big[B·T·F':3·B·T·F'] (gu widened into it under 16-bit, then SwiGLU's
// gradient in place). With a split backward (d non-nil) the two linears'
// output gradients go to d and their weight gradients are left to
// weightGrads.
func (l swiglu) backward(m *GPT, s *Stash, a mlpActs, dy []float32, z tensor.Buf, w mlpWeights, g mlpGrads, d *deferred) ([]float32, error) {
	bt := s.b * s.t
	n := bt * m.d.F
	dact, dgu := m.w.big[:n], m.w.big[n:3*n]
	full, err := m.leaveBack(dy, bt)
	if err != nil {
		return nil, err
	}
	if d != nil {
		copy(d.fc2, full)
		full, dgu = d.fc2, d.fc
	}
	l.down.backward(m, dact, full, a.fcg, w.projw, linGrads{w: g.projw, defer_: d != nil}, bt)
	gu := m.vals(a.fc, dgu, 2*n)
	m.k.SwiGLUBackwardSet(dgu, gu, dact, bt, m.d.F) // in place when gu is dgu
	return l.gu.backwardCol(m, dgu, z, w.fcw, linGrads{w: g.fcw, defer_: d != nil}, bt)
}

// weightGrads is a split backward's deferred half: the two linears'
// weight gradients from the output gradients d saved.
func (l swiglu) weightGrads(m *GPT, s *Stash, a mlpActs, z tensor.Buf, g mlpGrads, d *deferred) error {
	bt := s.b * s.t
	l.down.weightGrad(m, g.projw, m.rounded(d.fc2), a.fcg, bt)
	return l.gu.weightGradCol(m, g.fcw, d.fc, z, bt)
}
