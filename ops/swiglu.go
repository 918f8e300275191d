package ops

// SwiGLU (Shazeer 2020; Llama's MLP activation) over rows [gate | up] of
// 2F values:
//
//	act = SiLU(g)⊙u,   SiLU(g) = g·σ(g),   σ(g) = 1/(1 + e^(−g))
//
// and its gradient from dact:
//
//	dg = dact·u·σ(g)·(1 + g·(1 − σ(g)))      du = dact·SiLU(g)
//
// On a CPU with AVX2 and FMA (AVX-512 ones too) the rows run the 256-bit
// kernels of llama_amd64.s (ops/avx2gen): exp32's polynomial, the
// exponent built in its bits, 8 lanes at once. A row's tail (under 8
// elements) goes through the kernel too, padded, so that an element's
// value does not depend on where its column falls — tensor parallelism
// splits these rows by columns, and each rank must compute the single
// device's bits. Isa generic runs the Go loops below.

// vec2 says whether k runs the AVX2 element-wise kernels: the CPU has
// AVX2 and FMA and k's ISA is not generic.
func (k *Kernels) vec2() bool { return haveAVX2 && k.ISA() != "generic" }

// SwiGLUForward sets act[n,j] = SiLU(gu[n,j])·gu[n,F+j].
//
//	act (N,F)   gu (N,2F)
func SwiGLUForward(k *Kernels, act, gu []float32, N, F int) {
	if N == 0 || F == 0 {
		return
	}
	_, _ = act[N*F-1], gu[2*N*F-1]
	v := k.vec2()
	k.Parallel(N, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			swigluRow(v, act[n*F:n*F+F], gu[2*n*F:2*n*F+F], gu[2*n*F+F:2*n*F+2*F])
		}
	})
}

// SwiGLUBackwardSet SETS dgu to the gradient of SwiGLUForward given dact:
// dgu may be gu itself (each pair is read before it is written).
//
//	dgu, gu (N,2F)   dact (N,F)
func SwiGLUBackwardSet(k *Kernels, dgu, gu, dact []float32, N, F int) {
	if N == 0 || F == 0 {
		return
	}
	_, _, _ = dgu[2*N*F-1], gu[2*N*F-1], dact[N*F-1]
	v := k.vec2()
	k.Parallel(N, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			o := 2 * n * F
			swigluGradRow(v, dgu[o:o+F], dgu[o+F:o+2*F], gu[o:o+F], gu[o+F:o+2*F], dact[n*F:n*F+F])
		}
	})
}

// swigluRow is act = SiLU(g)⊙u over one row (the first n&^7 elements by
// the AVX2 kernel when v).
func swigluRow(v bool, act, g, u []float32) {
	g, u = g[:len(act)], u[:len(act)]
	if v {
		if n := len(act) &^ 7; n > 0 {
			swigluFwdAVX2(&act[0], &g[0], &u[0], n)
			act, g, u = act[n:], g[n:], u[n:]
		}
		if len(act) > 0 { // the tail through the kernel too: an element's bits never depend on its column
			var ta, tg, tu [8]float32
			copy(tg[:], g)
			copy(tu[:], u)
			swigluFwdAVX2(&ta[0], &tg[0], &tu[0], 8)
			copy(act, ta[:])
		}
		return
	}
	for i, x := range g {
		act[i] = x / (1 + exp32(-x)) * u[i]
	}
}

// swigluGradRow sets dg, du from g, u and dact over one row (dg may be g
// and du u; the first n&^7 elements by the AVX2 kernel when v).
func swigluGradRow(v bool, dg, du, g, u, dact []float32) {
	dg, du, g, u = dg[:len(dact)], du[:len(dact)], g[:len(dact)], u[:len(dact)]
	if v {
		if n := len(dact) &^ 7; n > 0 {
			swigluBwdAVX2(&dg[0], &du[0], &g[0], &u[0], &dact[0], n)
			dg, du, g, u, dact = dg[n:], du[n:], g[n:], u[n:], dact[n:]
		}
		if len(dact) > 0 { // the tail through the kernel too (see swigluRow)
			var tdg, tdu, tg, tu, td [8]float32
			copy(tg[:], g)
			copy(tu[:], u)
			copy(td[:], dact)
			swigluBwdAVX2(&tdg[0], &tdu[0], &tg[0], &tu[0], &td[0], 8)
			copy(dg, tdg[:])
			copy(du, tdu[:])
		}
		return
	}
	for i, d := range dact {
		x, y := g[i], u[i]
		sg := 1 / (1 + exp32(-x))
		dg[i] = d * y * sg * (1 + x*(1-sg))
		du[i] = d * x * sg
	}
}
