package ops

import "trellis/tensor"

// DecodeBF16 widens src into dst (len(dst) >= len(src)) exactly —
// tensor.DecodeBF16 bit for bit — on the kernels' threads, 16 lanes at a
// time in AVX-512 where the CPU has it.
func DecodeBF16(k *Kernels, dst []float32, src []tensor.BF16Bits) {
	decode16(k, dst, bits16(src), false)
}

// DecodeF16 widens src into dst (len(dst) >= len(src)) exactly —
// tensor.DecodeF16 bit for bit but for signalling NaNs, which VCVTPH2PS
// (used where the CPU has AVX-512) returns quiet — on the kernels' threads.
func DecodeF16(k *Kernels, dst []float32, src []tensor.F16Bits) {
	decode16(k, dst, bits16(src), true)
}

func decode16(k *Kernels, dst []float32, src []uint16, f16 bool) {
	const chunk = 1 << 14 // a multiple of 16
	dst = dst[:len(src)]
	h := halfOperands{f16: f16}
	k.Parallel((len(src)+chunk-1)/chunk, func(lo, hi int) {
		a, b := lo*chunk, min(hi*chunk, len(src))
		h.widenRow(dst[a:b], src[a:b])
	})
}
