package ops

// edgeKernels16 returns the 16-column row kernels (index: rows, 1 to 12)
// that go with the micro-kernels of im, or nil where there are none: they
// finish a row of scores that ends within the first half of a 32-key
// panel at half the FMAs of the 32-column kernel.
func edgeKernels16(im *gemmImpl) []microKernel {
	if im.name != "avx512" {
		return nil
	}
	return []microKernel{nil, gemmAVX512_1x16r, gemmAVX512_2x16r, gemmAVX512_3x16r, gemmAVX512_4x16r, gemmAVX512_5x16r, gemmAVX512_6x16r, gemmAVX512_7x16r, gemmAVX512_8x16r, gemmAVX512_9x16r, gemmAVX512_10x16r, gemmAVX512_11x16r, gemmAVX512_12x16r}
}
