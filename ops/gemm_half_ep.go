package ops

import (
	"log/slog"

	"trellis/tensor"
)

// MatMulBF16Ep is MatMulBF16 with the fp32 GEMM's epilogue, for a linear
// layer in bf16:
//
//	C = src + bias + op(A)·op(B)     src (M,N) with stride ldc, or nil; bias (N) or nil
//
// src + bias is rounded first and the product added to it as each tile is
// stored (the rounding of LinearResidualForward), in one pass over C.
func (k *Kernels) MatMulBF16Ep(l Layout, m, n, kk int, a []tensor.BF16Bits, lda int, b []tensor.BF16Bits, ldb int, c []float32, ldc int, src, bias []float32) {
	matmulCheck(l, m, n, kk, a, lda, b, ldb, c, ldc)
	epilogueCheck(m, n, ldc, src, bias)
	if k.bf == nil && k.note != nil {
		k.note.once.Do(func() {
			slog.Info("ops: bf16 matmuls widen to fp32 at packing and run the fp32 kernels", "reason", k.note.reason)
		})
	}
	h := &halfOperands{a: bits16(a), lda: lda, b: bits16(b), ldb: ldb, pairs: k.bf != nil}
	impl, bufs := k.impl, k.bufs
	if h.pairs {
		impl, bufs = k.bf, k.bfBufs
	}
	h.pk = impl.pack
	k.start(gemm{impl: impl, bufs: bufs, l: l, m: m, n: n, k: kk, c: c, ldc: ldc, src: src, bias: bias, h: h})
}

// MatMulF16Ep is MatMulF16 with the epilogue of MatMulBF16Ep: C = src +
// bias + op(A)·op(B), A and B fp16 widened to fp32 at packing.
func (k *Kernels) MatMulF16Ep(l Layout, m, n, kk int, a []tensor.F16Bits, lda int, b []tensor.F16Bits, ldb int, c []float32, ldc int, src, bias []float32) {
	matmulCheck(l, m, n, kk, a, lda, b, ldb, c, ldc)
	epilogueCheck(m, n, ldc, src, bias)
	h := &halfOperands{a: bits16(a), lda: lda, b: bits16(b), ldb: ldb, f16: true}
	h.pk = k.impl.pack
	k.start(gemm{impl: k.impl, bufs: k.bufs, l: l, m: m, n: n, k: kk, c: c, ldc: ldc, src: src, bias: bias, h: h})
}
