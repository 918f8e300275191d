package model

import (
	"trellis/ops"
	"trellis/rng"
	"trellis/tensor"
)

// A linear layer is y = x·Wᵀ + b, W (out, in) in PyTorch's layout, on the
// rank's part of it (Megatron, Shoeybi et al. 2019; t ranks, rank r):
//
//	column   W = [W_1; …; W_t] split by output rows: y_r = f(x)·W_rᵀ + b_r.
//	         f: forward identity (the input is replicated), backward the
//	         sum of every rank's input gradient (ReduceFromTP)
//	row      W = [W_1 … W_t] split by input columns: y = g(Σ_r x_r·W_rᵀ) + b,
//	         the bias added once, after the reduction.
//	         g: forward ReduceFromTP, backward identity
//
// With sequence parallelism (Korthikanti et al. 2022) f's forward becomes
// GatherSeq (the rank's tokens of the norm output in, every token out;
// backward ScatterSeq) and g's forward ScatterSeq (backward GatherSeq). At
// t = 1 both are plain dense layers (the row one's bias and residual in
// the GEMM's epilogue).
//
// The GEMMs read x and W in the policy's compute dtype with fp32
// accumulation:
//
//	y  = x·Wᵀ + b                   (fp32 out, bias and residual in fp32)
//	dx = dy·W                        (dy rounded to the compute dtype)
//	dW += dyᵀ·x                      (fp32, accumulated in fp32)
//	db += Σ_rows dy                  (from the fp32 dy)
//
// The backward is two halves: the input gradient (with f's reduction,
// started before the weight gradient so that it runs behind it) and the
// weight gradient, which a zero-bubble schedule defers (Qi et al. 2023).
type linear struct {
	row     bool // row-parallel (else column-parallel)
	in, out int  // the rank's input and output widths
	hp      bool // never fp8 (the output head: model/fp8.go)
	site    int  // its place in the block: siteAttnIn … siteMLPOut (delayed scaling's histories)
}

// gemm is out = (src) + x·wᵀ (+ bias) over N rows, or with acc out += x·wᵀ
// (under fp8 on the quantised operands).
func (l linear) gemm(m *GPT, out, src []float32, x, w tensor.Buf, bias []float32, N int) {
	x, w = l.fwd8(m, x, w, N)
	C, OC := l.in, l.out
	m.k.Gemm(ops.GEMM{Layout: ops.NT, M: N, N: OC, K: C, A: x.Head(N * C), LDA: C, B: w.Head(OC * C), LDB: C,
		C: out, LDC: OC, Src: src, Bias: bias})
}

// enter is a column layer's f: the full (B·T, C) input from the rank's n
// tokens x (with SP gathered: an fp32 x into the gath scratch; a 16-bit
// one widened exactly into dlnl, gathered, and rounded into the x
// scratch, which reproduces its bits).
func (m *GPT) enter(x tensor.Buf, bt int) (tensor.Buf, error) {
	if !m.d.sp {
		return x, nil
	}
	full := m.w.gath[:bt*m.d.C]
	if x.DType() == tensor.F32 {
		return tensor.F32s(full), m.tp.GatherSeq(full, x.F32())
	}
	local := m.w.dlnl[:x.Len()]
	m.k.Decode(local, x)
	if err := m.tp.GatherSeq(full, local); err != nil {
		return tensor.Buf{}, err
	}
	h := m.w.x.Head(bt * m.d.C)
	m.k.Encode(h, full)
	return h, nil
}

// forward is a column layer's y = f(x)·Wᵀ + b for the (B·T, in) output y
// (fp32), x the rank's n tokens of the input.
func (l linear) forward(m *GPT, y []float32, x, w tensor.Buf, b []float32, bt int) error {
	z, err := m.enter(x, bt)
	if err != nil {
		return err
	}
	l.gemm(m, y, nil, z, w, b, bt)
	return nil
}

// residual is a row layer with the residual branch around it:
//
//	out = res + drop(g(x·Wᵀ) + b)
//
// over the rank's n tokens of res and out (x its (B·T, in) columns).
func (l linear) residual(m *GPT, s *Stash, out, res []float32, x, w tensor.Buf, b []float32, site rng.Stream) error {
	bt, C := s.b*s.t, l.out
	if m.d.t == 1 {
		if !m.useDropout(s) {
			l.gemm(m, out, res, x, w, b, bt)
			return nil
		}
		br := m.w.branch[:bt*C]
		l.gemm(m, br, nil, x, w, b, bt)
		m.dropout(s, site, br, br, bt, false)
		m.k.ResidualForward(out, res, br, bt*C)
		return nil
	}
	part := m.w.big[:bt*C]
	l.gemm(m, part, nil, x, w, nil, bt)
	y, err := m.leave(part, bt)
	if err != nil {
		return err
	}
	n := m.d.tokens(bt)
	m.k.BiasForward(y, y, b, n, C)
	if m.useDropout(s) {
		m.dropout(s, site, y, y, n, false)
	}
	m.k.ResidualForward(out, res, y, n*C)
	return nil
}

// leave is a row layer's g: the rank's tokens of Σ_ranks partial (reduced
// in place, or scattered into the branch scratch with SP).
func (m *GPT) leave(partial []float32, bt int) ([]float32, error) {
	if !m.d.sp {
		return partial, m.tp.ReduceFromTP(partial)
	}
	local := m.w.branch[:m.d.tokens(bt)*m.d.C]
	return local, m.tp.ScatterSeq(local, partial)
}

// leaveBack is g's backward: the full (B·T, C) gradient of a row layer's
// output from the rank's tokens of it (gathered with SP).
func (m *GPT) leaveBack(local []float32, bt int) ([]float32, error) {
	if !m.d.sp {
		return local, nil
	}
	full := m.w.gath[:bt*m.d.C]
	return full, m.tp.GatherSeq(full, local)
}

// rounded is dy in the compute dtype for the backward GEMMs: dy itself in
// fp32, else its rounding into the dy scratch.
func (m *GPT) rounded(dy []float32) tensor.Buf {
	if !m.d.half {
		return tensor.F32s(dy)
	}
	h := m.w.dy.Head(len(dy))
	m.k.Encode(h, dy)
	return h
}

// inputGrad SETS dx = dy·W (dy (N, out), dx (N, in)).
func (l linear) inputGrad(m *GPT, dx []float32, dy, w tensor.Buf, N int) {
	dy, w = l.dgrad8(m, dy, w, N)
	m.k.Gemm(ops.GEMM{Layout: ops.NN, M: N, N: l.in, K: l.out, A: dy.Head(N * l.out), LDA: l.out, B: w.Head(l.out * l.in), LDB: l.in,
		C: dx[:N*l.in], LDC: l.in})
}

// weightGrad ACCUMULATES dW += dyᵀ·x (dy (N, out), x (N, in)).
func (l linear) weightGrad(m *GPT, dw []float32, dy, x tensor.Buf, N int) {
	dy, x = l.wgrad8(m, dy, x, N)
	m.k.Gemm(ops.GEMM{Layout: ops.TN, M: l.out, N: l.in, K: N, A: dy.Head(N * l.out), LDA: l.out, B: x.Head(N * l.in), LDB: l.in,
		C: dw, LDC: l.in, Acc: true})
}

// grads are where a linear's backward puts its parameter gradients.
type linGrads struct {
	w, b   []float32 // dW (out, in), db (out) or nil
	defer_ bool      // the weight gradient is deferred (a zero-bubble split)
}

// backward is a row layer's backward from the full (B·T, out) output
// gradient dy: dx SET (B·T, in), the bias gradient and, unless deferred,
// the weight gradient from the layer's input x.
func (l linear) backward(m *GPT, dx, dy []float32, x, w tensor.Buf, g linGrads, bt int) {
	d := m.rounded(dy)
	l.inputGrad(m, dx, d, w, bt)
	if !g.defer_ {
		l.weightGrad(m, g.w, d, x, bt)
	}
	if g.b != nil {
		m.k.BiasBackward(g.b, dy, bt, l.out)
	}
}

// backwardCol is a column layer's backward from its (B·T, out) output
// gradient dy: the layer's input gathered again with SP (unless the
// weight gradient is deferred; x is the rank's n tokens of it), the
// partial input gradient dy·W_r into dln, f's reduction started, the
// weight gradient and the bias gradient computed while it runs; it
// returns the rank's n tokens of the summed input gradient.
func (l linear) backwardCol(m *GPT, dy []float32, x, w tensor.Buf, g linGrads, bt int) ([]float32, error) {
	var z tensor.Buf
	if !g.defer_ {
		var err error
		if z, err = m.enter(x, bt); err != nil {
			return nil, err
		}
	}
	d := m.rounded(dy)
	l.inputGrad(m, m.w.dln, d, w, bt)
	dz, wait := m.startColReduce(bt)
	if !g.defer_ {
		l.weightGrad(m, g.w, d, z, bt)
	}
	if g.b != nil {
		m.k.BiasBackward(g.b, dy, bt, l.out)
	}
	return dz, wait()
}

// startColReduce starts f's backward on the partial input gradient in
// dln (B·T, C) and returns where the rank's tokens of the sum will be,
// with the function that waits for it.
func (m *GPT) startColReduce(bt int) ([]float32, func() error) {
	C := m.d.C
	if !m.d.sp {
		dz := m.w.dln[:bt*C]
		return dz, m.tp.StartReduceFromTP(dz)
	}
	dz := m.w.dlnl[:m.d.tokens(bt)*C]
	return dz, m.tp.StartScatterSeq(dz, m.w.dln[:bt*C])
}

// weightGradCol is a deferred column layer's weight gradient dW += dyᵀ·f(x).
func (l linear) weightGradCol(m *GPT, dw, dy []float32, x tensor.Buf, bt int) error {
	z, err := m.enter(x, bt)
	if err != nil {
		return err
	}
	l.weightGrad(m, dw, m.rounded(dy), z, bt)
	return nil
}
