package model

import (
	"trellis/tensor"
)

// A norm layer normalises each of the rank's n tokens over its C
// channels, replicated on every tensor-parallel rank (with sequence
// parallelism each rank normalises its own tokens, and the parameter
// gradients of one micro-batch are summed over the group before they are
// accumulated):
//
//	LayerNorm  out = (x − mean(x))·rstd·w + b,  rstd = 1/√(var(x) + ε)
//	RMSNorm    out = x·rstd·w,                  rstd = 1/√(mean(x²) + ε)
//
// Its output is the next linear's input (arch's Operand: 16-bit under
// bf16/fp16); it saves its statistics (fp32).
type norm struct {
	rms bool
	eps float32 // RMSNorm's ε (LayerNorm's is ops.LayerNormEps)
}

// normActs are a norm's saved activations: its output and statistics
// (mean is nil for RMSNorm).
type normActs struct {
	out        tensor.Buf
	mean, rstd []float32
}

// forward normalises x (n tokens) into a.out and returns it, the operand
// of the layer that follows.
func (l norm) forward(m *GPT, a normActs, x, w, b []float32, n int) tensor.Buf {
	C := m.d.C
	v := m.out(a.out, m.w.big, n*C)
	if l.rms {
		m.k.RMSNormForward(v, a.rstd, x[:n*C], w, n, C, l.eps)
	} else {
		m.k.LayerNormForward(v, a.mean, a.rstd, x[:n*C], w, b, n, C)
	}
	m.keep(a.out, v, false)
	return a.out.Head(n * C)
}

// backward ACCUMULATES the input gradient into dx and the parameter
// gradients into dw, db (nil for RMSNorm) from the output gradient dy,
// over the rank's n tokens; with SP the micro-batch's parameter
// gradients are summed over the group first.
func (l norm) backward(m *GPT, dx, dw, db, dy, x, w []float32, a normActs, n int) error {
	C := m.d.C
	if !m.d.sp {
		l.kernelBackward(m, dx, dw, db, dy, x, w, a, n)
		return nil
	}
	g := m.w.lnGrad
	clear(g)
	gw, gb := g[:C], g[C:2*C]
	if l.rms {
		g, gb = g[:C], nil
	}
	l.kernelBackward(m, dx, gw, gb, dy, x, w, a, n)
	if err := m.tp.ReduceFromTP(g); err != nil {
		return err
	}
	m.k.AddInto(dw, gw, C)
	if db != nil {
		m.k.AddInto(db, gb, C)
	}
	return nil
}

func (l norm) kernelBackward(m *GPT, dx, dw, db, dy, x, w []float32, a normActs, n int) {
	C := m.d.C
	if l.rms {
		m.k.RMSNormBackward(dx[:n*C], dw, dy[:n*C], x[:n*C], w, a.rstd, n, C)
		return
	}
	m.k.LayerNormBackward(dx[:n*C], dw, db, dy[:n*C], x[:n*C], w, a.mean, a.rstd, n, C)
}
