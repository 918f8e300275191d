package ops

import "trellis/tensor"

// EncodeBF16 rounds src into dst (len(dst) >= len(src)) to the nearest
// bf16, ties to even, NaN kept quiet — tensor.EncodeBF16 bit for bit — on
// the kernels' threads, 16 lanes at a time in AVX-512 where the CPU has it.
func EncodeBF16(k *Kernels, dst []tensor.BF16Bits, src []float32) {
	const chunk = 1 << 14 // a multiple of 16
	dst = dst[:len(src)]
	k.Parallel((len(src)+chunk-1)/chunk, func(lo, hi int) {
		a, b := lo*chunk, min(hi*chunk, len(src))
		i := a
		if haveAVX512 && b-a >= 16 {
			n := (b - a) &^ 15
			narrowBF16((*uint16)(&dst[a]), &src[a], n)
			i = a + n
		}
		tensor.EncodeBF16(dst[i:b], src[i:b])
	})
}

// EncodeF16 rounds src into dst (len(dst) >= len(src)) to the nearest
// fp16, ties to even, subnormals kept, NaN kept quiet — tensor.EncodeF16
// bit for bit — on the kernels' threads, 16 lanes at a time with
// VCVTPS2PH where the CPU has AVX-512.
func EncodeF16(k *Kernels, dst []tensor.F16Bits, src []float32) {
	const chunk = 1 << 14 // a multiple of 16
	dst = dst[:len(src)]
	k.Parallel((len(src)+chunk-1)/chunk, func(lo, hi int) {
		a, b := lo*chunk, min(hi*chunk, len(src))
		i := a
		if haveAVX512 && b-a >= 16 {
			n := (b - a) &^ 15
			narrowF16((*uint16)(&dst[a]), &src[a], n)
			i = a + n
		}
		tensor.EncodeF16(dst[i:b], src[i:b])
	})
}
