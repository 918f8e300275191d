package ops

import "math"

// RMSNormForward normalises each row of inp by its root mean square
// (Zhang & Sennrich 2019; Llama's norm, no mean and no bias):
//
//	rstd = 1/√(mean(x²) + ε)        out = x·rstd·w
//
// and saves rstd for the backward pass. On AVX2 (vec2) the scaling runs
// the kernel of llama_amd64.s over the row's first C&^7 channels, the rest
// in Go; the sum of squares is float64 (sumSquares).
//
//	out, inp (N,C)   w (C)   rstd (N)
func RMSNormForward(k *Kernels, out, rstd, inp, w []float32, N, C int, eps float32) {
	if N == 0 || C == 0 {
		return
	}
	_, _, _, _ = out[N*C-1], inp[N*C-1], w[C-1], rstd[N-1]
	v := k.vec2() && C >= 8
	k.Parallel(N, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			x, o := inp[n*C:n*C+C], out[n*C:n*C+C]
			s := float32(1 / math.Sqrt(sumSquares(x)/float64(C)+float64(eps)))
			scaleMul(v, o, x, w, s)
			rstd[n] = s
		}
	})
}

// sumSquares is Σ x[i]², summed in float64 whatever the ISA. The AVX2
// sum in fp32 lanes (an rmsSqAVX2 kernel, since removed) is not used: with it, tensor parallelism's
// 16-bit Llama passes drifted from the single device's to half their
// distance from fp32 (parallel/tp's TestHalfPartsMatchOneDevice, fp16,
// tp=4 with dropout: gradients 4.3e-5 against 8.0e-5), where the float64
// sum keeps them within the bounds every other case meets. A row costs C
// multiply-adds beside its GEMMs' 3C² and more.
func sumSquares(x []float32) float64 {
	var ss float64
	for _, e := range x {
		ss += float64(e) * float64(e)
	}
	return ss
}

// scaleMul sets o[i] = x[i]·s·w[i].
func scaleMul(v bool, o, x, w []float32, s float32) {
	x, w = x[:len(o)], w[:len(o)]
	if n := len(o) &^ 7; v {
		rmsScaleAVX2(&o[0], &x[0], &w[0], n, s)
		o, x, w = o[n:], x[n:], w[n:]
	}
	for i, e := range x {
		o[i] = e * s * w[i]
	}
}

// RMSNormBackward ACCUMULATES the gradients of RMSNormForward. With
// x̂ = x·rstd and g = w⊙dout:
//
//	dinp += rstd·(g − x̂·mean(g⊙x̂))      dw += Σ_rows dout⊙x̂
//
//	dinp, dout, inp (N,C)   dw, w (C)   rstd (N)
//
// dw is summed over rows in row order by threads that split the channels,
// so the result does not depend on the thread count (the channel chunks
// are whole multiples of 16, so every channel takes the same vector or
// Go path whatever the count).
func RMSNormBackward(k *Kernels, dinp, dw, dout, inp, w, rstd []float32, N, C int) {
	if N == 0 || C == 0 {
		return
	}
	_, _, _, _, _, _ = dinp[N*C-1], dout[N*C-1], inp[N*C-1], w[C-1], dw[C-1], rstd[N-1]
	v := k.vec2() && C >= 8
	k.Parallel(N, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			dy, x, dx := dout[n*C:n*C+C], inp[n*C:n*C+C], dinp[n*C:n*C+C]
			s := rstd[n]
			m := float32(float64(s) * rmsDot(v, w, dy, x) / float64(C)) // mean(g⊙x̂)
			rmsInputGrad(v, dx, w, dy, x, s, s*s*m)
		}
	})
	chunks := colChunks(k.Threads(), C)
	k.Parallel(chunks, func(lo, hi int) {
		for c := lo; c < hi; c++ {
			c0, c1 := colChunk(c, chunks, C)
			for n := 0; n < N; n++ {
				s, dy, x := rstd[n], dout[n*C+c0:n*C+c1], inp[n*C+c0:n*C+c1]
				rmsParamGrad(v, dw[c0:c1], dy, x, s)
			}
		}
	})
}

// rmsDot is Σ w[i]·dy[i]·x[i] (float64 beyond the vector kernel's part).
func rmsDot(v bool, w, dy, x []float32) float64 {
	var d float64
	if n := len(x) &^ 7; v {
		d = float64(rmsDotAVX2(&w[0], &dy[0], &x[0], n))
		w, dy, x = w[n:], dy[n:], x[n:]
	}
	for i := range x {
		d += float64(w[i]*dy[i]) * float64(x[i])
	}
	return d
}

// rmsInputGrad sets dx[i] += s·w[i]·dy[i] − c·x[i].
func rmsInputGrad(v bool, dx, w, dy, x []float32, s, c float32) {
	w, dy, x = w[:len(dx)], dy[:len(dx)], x[:len(dx)]
	if n := len(dx) &^ 7; v {
		rmsBwdAVX2(&dx[0], &w[0], &dy[0], &x[0], n, s, c)
		dx, w, dy, x = dx[n:], w[n:], dy[n:], x[n:]
	}
	for i := range dx {
		dx[i] += s*w[i]*dy[i] - c*x[i]
	}
}

// rmsParamGrad sets g[i] += dy[i]·(x[i]·s).
func rmsParamGrad(v bool, g, dy, x []float32, s float32) {
	g, x = g[:len(dy)], x[:len(dy)]
	if n := len(dy) &^ 7; v && n > 0 {
		rmsParamAVX2(&g[0], &dy[0], &x[0], n, s)
		g, dy, x = g[n:], dy[n:], x[n:]
	}
	for i, e := range dy {
		g[i] += e * (x[i] * s)
	}
}
