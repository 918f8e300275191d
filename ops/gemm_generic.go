package ops

import "unsafe"

// genericImpl is the pure-Go micro-kernel, used where no assembly one runs
// and when forced with isa "generic" or TRELLIS_KERNELS=generic.
func genericImpl() *gemmImpl {
	return &gemmImpl{
		name: "generic", mr: 2, nr: 4, kc: 256, mc: 1024, nc: 512,
		kernels: []microKernel{2: gemmGeneric2x4}, pack: packer{copy: packCopy, transpose: packTranspose}, peak: fmaLoopGeneric, peakFlops: 16,
		minFlops: minFlopsPerThread / 32, // 30 times slower kernels
	}
}

// gemmGeneric2x4 is the microKernel for 2×4 tiles in plain Go: eight
// scalar accumulators, which with the six operands of a k step fit the 16
// SSE registers (a 4×4 tile spills and runs at two thirds of the speed).
func gemmGeneric2x4(kc int, pa *float32, sa int, pb *float32, sb int, pc *float32, ldc int, _ int, src, bias *float32) {
	if kc == 0 {
		sa, sb = 0, 0
	}
	a := unsafe.Slice(pa, max(kc-1, 0)*sa+2)
	b := unsafe.Slice(pb, max(kc-1, 0)*sb+4)
	var c00, c01, c02, c03, c10, c11, c12, c13 float32
	for p := 0; p < kc; p++ {
		av, bv := a[sa*p:sa*p+2:sa*p+2], b[sb*p:sb*p+4:sb*p+4]
		a0, a1 := av[0], av[1]
		b0, b1, b2, b3 := bv[0], bv[1], bv[2], bv[3]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
	}
	c := unsafe.Slice(pc, ldc+4)
	var s, bs []float32
	if src != nil {
		s = unsafe.Slice(src, ldc+4)
	}
	if bias != nil {
		bs = unsafe.Slice(bias, 4)
	}
	storeRow4(c[0:4:4], rowOf(s, 0), bs, c00, c01, c02, c03)
	storeRow4(c[ldc:ldc+4:ldc+4], rowOf(s, ldc), bs, c10, c11, c12, c13)
}

// rowOf is s[off:off+4], or nil for a nil s.
func rowOf(s []float32, off int) []float32 {
	if s == nil {
		return nil
	}
	return s[off : off+4 : off+4]
}

// storeRow4 sets c[j] = x_j + (src[j] + bias[j]), src and bias skipped
// when nil (the epilogue of microKernel). src may be c.
func storeRow4(c, src, bias []float32, x0, x1, x2, x3 float32) {
	var e [4]float32
	switch {
	case src != nil && bias != nil:
		e = [4]float32{src[0] + bias[0], src[1] + bias[1], src[2] + bias[2], src[3] + bias[3]}
	case src != nil:
		e = [4]float32{src[0], src[1], src[2], src[3]}
	case bias != nil:
		e = [4]float32{bias[0], bias[1], bias[2], bias[3]}
	default:
		c[0], c[1], c[2], c[3] = x0, x1, x2, x3
		return
	}
	c[0], c[1], c[2], c[3] = x0+e[0], x1+e[1], x2+e[2], x3+e[3]
}

// fmaLoopGeneric runs n iterations of eight independent scalar
// multiply-adds (16 flops each), the pure-Go peak.
func fmaLoopGeneric(n int) {
	x0, x1, x2, x3, x4, x5, x6, x7 := float32(1), float32(2), float32(3), float32(4), float32(5), float32(6), float32(7), float32(8)
	const m, d = 0.999, 1e-3
	for i := 0; i < n; i++ {
		x0 = x0*m + d
		x1 = x1*m + d
		x2 = x2*m + d
		x3 = x3*m + d
		x4 = x4*m + d
		x5 = x5*m + d
		x6 = x6*m + d
		x7 = x7*m + d
	}
	sinkFloat(x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7)
}

//go:noinline
func sinkFloat(float32) {}
