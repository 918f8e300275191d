package ops

import "trellis/tensor"

// Backend is the seam between the engine and its hardware: every kernel
// the model's layers, the state strategies and the optimizer call. They
// hold a Backend and call nothing else of this package's, so a device
// backend (CUDA, say) is a new implementation of this interface plus an
// allocator for device.Device, not an edit of every package.
//
// *Kernels is the CPU implementation: avo-generated AVX-512 and AVX2+FMA
// micro-kernels with pure-Go fallbacks, the instruction set chosen at run
// time (Config.ISA, TRELLIS_KERNELS=generic forces the portable Go
// kernels). Buffers are host slices; the ones whose element type is the
// precision policy's are tensor.Buf, which carries its dtype.
//
// The conventions of the kernels hold: dimension names as in doc.go,
// backward kernels ACCUMULATE into gradients unless their name ends in
// Set, and every result is the same whatever the thread count.
type Backend interface {
	// Threads is the number of goroutines a kernel may use.
	Threads() int
	// ISA names the instruction set of the GEMM micro-kernels.
	ISA() string

	// Gemm is C = op(A)·op(B) (see GEMM) with A and B of one dtype: fp32,
	// bf16 or fp16, accumulated in fp32.
	Gemm(g GEMM)
	// BiasForward is out[n,:] = res[n,:] + bias (either may be nil).
	BiasForward(out, res, bias []float32, N, OC int)
	// BiasBackward is dbias += Σ_n dout[n,:].
	BiasBackward(dbias, dout []float32, N, OC int)

	LayerNormForward(out, mean, rstd, inp, w, b []float32, N, C int)
	LayerNormBackward(dinp, dw, db, dout, inp, w, mean, rstd []float32, N, C int)
	RMSNormForward(out, rstd, inp, w []float32, N, C int, eps float32)
	RMSNormBackward(dinp, dw, dout, inp, w, rstd []float32, N, C int)
	GELUForward(out, inp []float32, n int)
	GELUBackwardSet(dinp, inp, dout []float32, n int)

	// The attention kernels take qkv rows [q (C = NH·HS) | k | v (KV·HS
	// each)]: NH query heads sharing KV key/value heads (KV = NH: multi-head).
	AttentionForward(out, att, qkv []float32, B, T, C, NH, KV int)
	AttentionBackwardSet(dqkv, scratch, dout, qkv, att []float32, B, T, C, NH, KV int)
	AttentionScratchSize(B, T, KV int) int
	FlashAttentionForward(out, lse, qkv []float32, B, T, C, NH, KV int)
	FlashAttentionBackward(dqkv, dout, qkv, out, lse []float32, B, T, C, NH, KV int)
	// AttentionTileForward and AttentionTileBackward are one tile of a
	// blockwise attention whose partial results the caller merges (the
	// ring attention of context parallelism): the online softmax's merge
	// of a (query chunk, key chunk) pair, and its gradients.
	AttentionTileForward(t AttnTile, O []float32, LDO int, m, l, S []float32)
	AttentionTileBackward(t AttnTile, dO []float32, LDO int, lse, D []float32, dQ []float32, LDDQ int, dK, dV []float32, LDDKV int, P, dS []float32)
	// RoPEForward rotates the q and k heads of qkv in place (RoPEBackward
	// takes a gradient back through it); RoPETable fills its angles.
	RoPETable(cos, sin []float32, T, HS int, theta float64)
	RoPETableRows(cos, sin []float32, first, n, HS int, theta float64) // rows [first, first+n) of RoPETable's
	RoPEForward(qkv, cos, sin []float32, B, T, NH, KV, HS int)
	RoPEBackward(dqkv, cos, sin []float32, B, T, NH, KV, HS int)
	// SwiGLUForward is act = SiLU(gate)⊙up from rows [gate | up];
	// SwiGLUBackwardSet SETS their gradient (in place over gu allowed).
	SwiGLUForward(act, gu []float32, N, F int)
	SwiGLUBackwardSet(dgu, gu, dact []float32, N, F int)

	// A mixture-of-experts layer's kernels (moe.go): one grouped GEMM
	// over the experts' independent products, the router's softmax, and
	// the tokens' moves into expert order and back (rows[t·K+j] is token
	// t's j-th assignment's row, −1 when dropped).
	GroupedGemm(gs []GEMM)
	RouterSoftmax(probs, logits []float32, N, E int)
	RouterSoftmaxBackwardSet(dlogits, probs, dprobs []float32, N, E int)
	RouterSigmoid(probs, logits []float32, N, E int)
	RouterSigmoidBackwardSet(dlogits, probs, dprobs []float32, N, E int)
	MoEDispatch(dst, src tensor.Buf, rows []int32, N, K, C int)
	MoECombine(out, y []float32, gates []float32, rows []int32, N, K, C int)
	MoECombineBackward(dyr, dgates, dy, y, gates []float32, rows []int32, N, K, C int)

	CrossEntropyForward(probs, losses, logits []float32, targets []int32, N, V int) float32
	CrossEntropyBackward(dlogits, probs []float32, targets []int32, dloss float32, N, V int)
	VocabRowMax(mx, logits []float32, N, V, valid int)
	VocabExpSum(sum, tgt, logits, mx []float32, targets []int32, lo, N, V, valid int)
	VocabNormalize(losses, logits, sum, tgt []float32, N, V, valid int) float64
	VocabLossBackward(dlogits, probs []float32, targets []int32, lo, N, V, valid int, g float32)

	// EncoderForward is out[b,t,:] = wte[inp[b,t],:] + wpe[t,:], the
	// tables in their dtype (a 16-bit table's rows widened exactly).
	EncoderForward(out []float32, inp []int32, wte, wpe tensor.Buf, B, T, C int)
	EncoderBackward(dwte, dwpe, dout []float32, inp []int32, B, T, C int)
	LookupRows(out []float32, ids []int32, wte tensor.Buf, lo, n, C int)
	AddPositions(out, h []float32, wpe tensor.Buf, first, T, n, C int)
	RowsBackward(dwte, dwpe, dh []float32, ids []int32, lo, n, T, C int)

	DropoutForward(d Dropout, out, inp []float32, n int)
	DropoutBackward(d Dropout, dinp, dout []float32, n int)
	ResidualForward(out, a, b []float32, n int)
	AddInto(dst, src []float32, n int)

	// Encode rounds src into dst's 16-bit dtype (to nearest even); Decode
	// widens src into dst exactly (an fp32 src is copied).
	Encode(dst tensor.Buf, src []float32)
	Decode(dst []float32, src tensor.Buf)

	AdamW(h AdamWHyper, params, grads, m, v []float32)
}

// GEMM is one matrix product C = op(A)·op(B), m×n from a k-long inner
// dimension, A and B row-major with leading dimensions LDA and LDB and the
// Layout's transposes. C is SET, ACCUMULATED into (Acc) or, with Src or
// Bias, set to Src + Bias + product (the epilogue's rounding: C filled
// with Src + Bias, the product accumulated on top; Acc must be false).
type GEMM struct {
	Layout  Layout
	M, N, K int
	A       tensor.Buf
	LDA     int
	B       tensor.Buf
	LDB     int
	C       []float32
	LDC     int
	Acc     bool
	Src     []float32 // (M, LDC) or nil
	Bias    []float32 // (N) or nil
}

var _ Backend = (*Kernels)(nil)

// Gemm dispatches on the operands' dtype.
func (k *Kernels) Gemm(g GEMM) {
	if g.A.DType() != g.B.DType() {
		panic("ops: Gemm of " + g.A.DType().String() + " by " + g.B.DType().String())
	}
	ep := g.Src != nil || g.Bias != nil
	if ep && g.Acc {
		panic("ops: Gemm with both Acc and an epilogue")
	}
	switch g.A.DType() {
	case tensor.F32:
		if ep {
			k.matMulEp(g.Layout, g.M, g.N, g.K, g.A.F32(), g.LDA, g.B.F32(), g.LDB, g.C, g.LDC, g.Src, g.Bias)
			return
		}
		k.MatMul(g.Layout, g.M, g.N, g.K, g.A.F32(), g.LDA, g.B.F32(), g.LDB, g.C, g.LDC, g.Acc)
	case tensor.BF16:
		a, b := tensor.BF16View(g.A.Bits()), tensor.BF16View(g.B.Bits())
		if ep {
			k.MatMulBF16Ep(g.Layout, g.M, g.N, g.K, a, g.LDA, b, g.LDB, g.C, g.LDC, g.Src, g.Bias)
			return
		}
		k.MatMulBF16(g.Layout, g.M, g.N, g.K, a, g.LDA, b, g.LDB, g.C, g.LDC, g.Acc)
	default:
		a, b := tensor.F16View(g.A.Bits()), tensor.F16View(g.B.Bits())
		if ep {
			k.MatMulF16Ep(g.Layout, g.M, g.N, g.K, a, g.LDA, b, g.LDB, g.C, g.LDC, g.Src, g.Bias)
			return
		}
		k.MatMulF16(g.Layout, g.M, g.N, g.K, a, g.LDA, b, g.LDB, g.C, g.LDC, g.Acc)
	}
}

func (k *Kernels) BiasForward(out, res, bias []float32, N, OC int) {
	BiasForward(k, out, res, bias, N, OC)
}
func (k *Kernels) BiasBackward(dbias, dout []float32, N, OC int) { BiasBackward(k, dbias, dout, N, OC) }
func (k *Kernels) LayerNormForward(out, mean, rstd, inp, w, b []float32, N, C int) {
	LayerNormForward(k, out, mean, rstd, inp, w, b, N, C)
}
func (k *Kernels) LayerNormBackward(dinp, dw, db, dout, inp, w, mean, rstd []float32, N, C int) {
	LayerNormBackward(k, dinp, dw, db, dout, inp, w, mean, rstd, N, C)
}
func (k *Kernels) RMSNormForward(out, rstd, inp, w []float32, N, C int, eps float32) {
	RMSNormForward(k, out, rstd, inp, w, N, C, eps)
}
func (k *Kernels) RMSNormBackward(dinp, dw, dout, inp, w, rstd []float32, N, C int) {
	RMSNormBackward(k, dinp, dw, dout, inp, w, rstd, N, C)
}
func (k *Kernels) GELUForward(out, inp []float32, n int) { GELUForward(k, out, inp, n) }
func (k *Kernels) GELUBackwardSet(dinp, inp, dout []float32, n int) {
	GELUBackwardSet(k, dinp, inp, dout, n)
}
func (k *Kernels) AttentionForward(out, att, qkv []float32, B, T, C, NH, KV int) {
	AttentionForward(k, out, att, qkv, B, T, C, NH, KV)
}
func (k *Kernels) AttentionBackwardSet(dqkv, scratch, dout, qkv, att []float32, B, T, C, NH, KV int) {
	AttentionBackwardSet(k, dqkv, scratch, dout, qkv, att, B, T, C, NH, KV)
}
func (k *Kernels) AttentionScratchSize(B, T, KV int) int { return AttentionScratchSize(k, B, T, KV) }
func (k *Kernels) FlashAttentionForward(out, lse, qkv []float32, B, T, C, NH, KV int) {
	FlashAttentionForward(k, out, lse, qkv, B, T, C, NH, KV)
}
func (k *Kernels) FlashAttentionBackward(dqkv, dout, qkv, out, lse []float32, B, T, C, NH, KV int) {
	FlashAttentionBackward(k, dqkv, dout, qkv, out, lse, B, T, C, NH, KV)
}
func (k *Kernels) RoPETable(cos, sin []float32, T, HS int, theta float64) {
	RoPETable(cos, sin, T, HS, theta)
}
func (k *Kernels) RoPEForward(qkv, cos, sin []float32, B, T, NH, KV, HS int) {
	RoPEForward(k, qkv, cos, sin, B, T, NH, KV, HS)
}
func (k *Kernels) RoPEBackward(dqkv, cos, sin []float32, B, T, NH, KV, HS int) {
	RoPEBackward(k, dqkv, cos, sin, B, T, NH, KV, HS)
}
func (k *Kernels) SwiGLUForward(act, gu []float32, N, F int) { SwiGLUForward(k, act, gu, N, F) }
func (k *Kernels) SwiGLUBackwardSet(dgu, gu, dact []float32, N, F int) {
	SwiGLUBackwardSet(k, dgu, gu, dact, N, F)
}
func (k *Kernels) CrossEntropyForward(probs, losses, logits []float32, targets []int32, N, V int) float32 {
	return CrossEntropyForward(k, probs, losses, logits, targets, N, V)
}
func (k *Kernels) CrossEntropyBackward(dlogits, probs []float32, targets []int32, dloss float32, N, V int) {
	CrossEntropyBackward(k, dlogits, probs, targets, dloss, N, V)
}
func (k *Kernels) EncoderBackward(dwte, dwpe, dout []float32, inp []int32, B, T, C int) {
	EncoderBackward(k, dwte, dwpe, dout, inp, B, T, C)
}
func (k *Kernels) DropoutForward(d Dropout, out, inp []float32, n int) { d.Forward(k, out, inp, n) }
func (k *Kernels) DropoutBackward(d Dropout, dinp, dout []float32, n int) {
	d.Backward(k, dinp, dout, n)
}
func (k *Kernels) ResidualForward(out, a, b []float32, n int) { ResidualForward(k, out, a, b, n) }
func (k *Kernels) AddInto(dst, src []float32, n int)          { AddInto(k, dst, src, n) }

// Encode rounds src into dst (bf16 or fp16).
func (k *Kernels) Encode(dst tensor.Buf, src []float32) {
	switch dst.DType() {
	case tensor.BF16:
		EncodeBF16(k, tensor.BF16View(dst.Bits()), src)
	case tensor.F16:
		EncodeF16(k, tensor.F16View(dst.Bits()), src)
	default:
		copy(dst.F32(), src)
	}
}

// Decode widens src into dst exactly.
func (k *Kernels) Decode(dst []float32, src tensor.Buf) {
	switch src.DType() {
	case tensor.BF16:
		DecodeBF16(k, dst, tensor.BF16View(src.Bits()))
	case tensor.F16:
		DecodeF16(k, dst, tensor.F16View(src.Bits()))
	default:
		copy(dst, src.F32())
	}
}
