package ops

import "golang.org/x/sys/cpu"

//go:generate go run ./asmgen -out gemm_amd64.s -stubs gemm_stub_amd64.go -pkg ops

// archImpls returns the assembly micro-kernels this CPU runs, best first.
// cpu.X86 reports AVX-512 and AVX only when the OS saves their registers.
func archImpls() []*gemmImpl {
	var out []*gemmImpl
	if cpu.X86.HasAVX512F {
		out = append(out, &gemmImpl{
			name: "avx512", mr: 12, nr: 32, kc: 256, kcRows: 512, mc: 1032, nc: 512,
			kernels: []microKernel{nil, gemmAVX512_1x32, gemmAVX512_2x32, gemmAVX512_3x32, gemmAVX512_4x32,
				gemmAVX512_5x32, gemmAVX512_6x32, gemmAVX512_7x32, gemmAVX512_8x32, gemmAVX512_9x32,
				gemmAVX512_10x32, gemmAVX512_11x32, gemmAVX512_12x32},
			rowKernels: []microKernel{nil, gemmAVX512_1x32r, gemmAVX512_2x32r, gemmAVX512_3x32r, gemmAVX512_4x32r,
				gemmAVX512_5x32r, gemmAVX512_6x32r, gemmAVX512_7x32r, gemmAVX512_8x32r, gemmAVX512_9x32r,
				gemmAVX512_10x32r, gemmAVX512_11x32r, gemmAVX512_12x32r},
			masked: true, direct: directRule{a: 1024, aTN: 1024, bM: 64, bSize: 16384},
			pack: packer{copy: packCopyAVX512, transpose: packTransposeAVX512}, peak: fmaLoopAVX512, peakFlops: 24 * 16 * 2, minFlops: minFlopsPerThread,
		})
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		out = append(out, &gemmImpl{
			name: "avx2", mr: 6, nr: 16, kc: 256, mc: 1032, nc: 512,
			kernels: []microKernel{6: gemmAVX2_6x16},
			pack:    packer{copy: packCopy, transpose: packTranspose}, peak: fmaLoopAVX2, peakFlops: 12 * 8 * 2, minFlops: minFlopsPerThread,
		})
	}
	return out
}

// bf16Impl returns the VDPBF16PS micro-kernels that go with the fp32
// impl g (avx512 only), or nil and the reason there are none.
func bf16Impl(g *gemmImpl) (*gemmImpl, string) {
	switch {
	case g.name != "avx512":
		return nil, "isa " + g.name + " has no bf16 kernels"
	case !cpu.X86.HasAVX512BF16:
		return nil, "this CPU lacks AVX512_BF16"
	}
	return &gemmImpl{
		name: "avx512bf16", mr: 12, nr: 32, kc: 512, mc: 1032, nc: 512, // kc counts k: 256 pairs, the bytes of fp32's 256
		kernels: []microKernel{nil, gemmBF16_1x32, gemmBF16_2x32, gemmBF16_3x32, gemmBF16_4x32, gemmBF16_5x32, gemmBF16_6x32,
			gemmBF16_7x32, gemmBF16_8x32, gemmBF16_9x32, gemmBF16_10x32, gemmBF16_11x32, gemmBF16_12x32},
		masked: true, pack: packer{copy: packCopyAVX512, transpose: packTransposeAVX512}, // moves pairs as dwords (gemm_half.go)
		peak: dotLoopBF16, peakFlops: 24 * 64, minFlops: minFlopsPerThread,
	}, ""
}

// packTransposeAVX512 is packTranspose with the 16-column blocks of full
// 12- and 32-row panels (the A and B panels of the AVX-512 kernel)
// transposed in registers.
func packTransposeAVX512(src []float32, ld, r0, c0, rows, cols int, dst []float32, w int) {
	n16 := cols / 16
	if n16 == 0 || rows != w || (w != 12 && w != 32) {
		packTranspose(src, ld, r0, c0, rows, cols, dst, w)
		return
	}
	_ = src[(r0+rows-1)*ld+c0+16*n16-1] // the asm stays inside src and dst
	_ = dst[16*n16*w-1]
	if w == 12 {
		transposeAVX512_12x12(&src[r0*ld+c0], ld, &dst[0], n16)
	} else {
		transposeAVX512_16x32(&src[r0*ld+c0], ld, &dst[0], n16)
		transposeAVX512_16x32(&src[(r0+16)*ld+c0], ld, &dst[16], n16)
	}
	packTranspose(src, ld, r0, c0+16*n16, rows, cols-16*n16, dst[16*n16*w:], w)
}

// packCopyAVX512 is packCopy with the full panels of width 12 and 32 (the
// A and B panels of the AVX-512 kernel) moved by generated code, in groups
// of packGroup panels walked row by row.
func packCopyAVX512(src []float32, ld, r0, c0, rows, cols int, dst []float32, w int) {
	full := cols / w
	if full == 0 || rows == 0 || (w != 12 && w != 32) {
		packCopy(src, ld, r0, c0, rows, cols, dst, w)
		return
	}
	_ = src[(r0+rows-1)*ld+c0+full*w-1] // the asm stays inside src and dst
	_ = dst[full*w*rows-1]
	for q := 0; q < full; q += packGroup {
		n := min(packGroup, full-q)
		if w == 12 {
			copyPanelsAVX512_12(&src[r0*ld+c0+q*w], ld, &dst[q*w*rows], rows, n)
		} else {
			copyPanelsAVX512_32(&src[r0*ld+c0+q*w], ld, &dst[q*w*rows], rows, n)
		}
	}
	packCopy(src, ld, r0, c0+full*w, rows, cols-full*w, dst[full*w*rows:], w)
}
