package model

import "trellis/ops"

// The two halves of an fp32 linear layer's backward, apart (the
// tensor-parallel column layers reduce the input gradient while the weight
// gradient is computed; zero-bubble schedules defer the weight gradient).
// Together, on the same operands, they are linearBackwardSet's GEMMs. A
// 16-bit runner's passes call halfGEMMs (block16.go, tp16.go).

// linearInputGrad SETS dinp = dout·w:
//
//	dinp (N,C)   dout (N,OC)   w (OC,C)
func (m *GPT) linearInputGrad(dinp, dout, w []float32, N, C, OC int) {
	m.k.MatMul(ops.NN, N, C, OC, dout, OC, w, C, dinp, C, false)
}

// linearWeightGrad ACCUMULATES dw += doutᵀ·inp:
//
//	dw (OC,C)   dout (N,OC)   inp (N,C)
func (m *GPT) linearWeightGrad(dw, dout, inp []float32, N, C, OC int) {
	m.k.MatMul(ops.TN, OC, C, N, dout, OC, inp, C, dw, C, true)
}
