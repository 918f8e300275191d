package model

import (
	"trellis/ops"
	"trellis/tensor"
)

// The two halves of a linear layer's backward, apart (the tensor-parallel
// column layers reduce the input gradient while the weight gradient is
// computed; zero-bubble schedules defer the weight gradient), in the
// runner's precision. Together, on the same operands, they are
// linearBackwardSet's GEMMs bit for bit.

// linearInputGrad SETS dinp = dout·w, in 16-bit under mixed precision
// (dout rounded into the dy scratch, where it stays for linearWeightGrad):
//
//	dinp (N,C)   dout (N,OC)   w (OC,C)
func (m *GPT) linearInputGrad(dinp, dout, w []float32, N, C, OC int) {
	if m.half == nil {
		m.k.MatMul(ops.NN, N, C, OC, dout, OC, w, C, dinp, C, false)
		return
	}
	dy := m.half.dy[:N*OC]
	m.encode(dy, dout[:N*OC])
	wh := m.halfOf(w[:OC*C])
	if m.half.dt == tensor.F16 {
		m.k.MatMulF16(ops.NN, N, C, OC, asF16(dy), OC, asF16(wh), C, dinp, C, false)
		return
	}
	m.k.MatMulBF16(ops.NN, N, C, OC, asBF16(dy), OC, asBF16(wh), C, dinp, C, false)
}

// linearWeightGrad ACCUMULATES dw += doutᵀ·inp, in 16-bit under mixed
// precision; dyKept says the dy scratch still holds dout, rounded by
// linearInputGrad (no GEMM ran in between).
//
//	dw (OC,C)   dout (N,OC)   inp (N,C)
func (m *GPT) linearWeightGrad(dw, dout, inp []float32, N, C, OC int, dyKept bool) {
	if m.half == nil {
		m.k.MatMul(ops.TN, OC, C, N, dout, OC, inp, C, dw, C, true)
		return
	}
	dy, x := m.half.dy[:N*OC], m.half.x[:N*C]
	if !dyKept {
		m.encode(dy, dout[:N*OC])
	}
	m.encode(x, inp[:N*C])
	if m.half.dt == tensor.F16 {
		m.k.MatMulF16(ops.TN, OC, C, N, asF16(dy), OC, asF16(x), C, dw, C, true)
		return
	}
	m.k.MatMulBF16(ops.TN, OC, C, N, asBF16(dy), OC, asBF16(x), C, dw, C, true)
}
