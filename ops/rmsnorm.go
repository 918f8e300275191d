package ops

import "math"

// RMSNormForward normalises each row of inp by its root mean square
// (Zhang & Sennrich 2019; Llama's norm, no mean and no bias):
//
//	rstd = 1/√(mean(x²) + ε)        out = x·rstd·w
//
// and saves rstd for the backward pass.
//
//	out, inp (N,C)   w (C)   rstd (N)
func RMSNormForward(k *Kernels, out, rstd, inp, w []float32, N, C int, eps float32) {
	if N == 0 || C == 0 {
		return
	}
	_, _, _, _ = out[N*C-1], inp[N*C-1], w[C-1], rstd[N-1]
	k.Parallel(N, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			x, o := inp[n*C:n*C+C], out[n*C:n*C+C]
			var ss float64
			for _, v := range x {
				ss += float64(v) * float64(v)
			}
			s := float32(1 / math.Sqrt(ss/float64(C)+float64(eps)))
			for i, v := range x {
				o[i] = v * s * w[i]
			}
			rstd[n] = s
		}
	})
}

// RMSNormBackward ACCUMULATES the gradients of RMSNormForward. With
// x̂ = x·rstd and g = w⊙dout:
//
//	dinp += rstd·(g − x̂·mean(g⊙x̂))      dw += Σ_rows dout⊙x̂
//
//	dinp, dout, inp (N,C)   dw, w (C)   rstd (N)
//
// dw is summed over rows in row order by threads that split the channels,
// so the result does not depend on the thread count.
func RMSNormBackward(k *Kernels, dinp, dw, dout, inp, w, rstd []float32, N, C int) {
	if N == 0 || C == 0 {
		return
	}
	_, _, _, _, _, _ = dinp[N*C-1], dout[N*C-1], inp[N*C-1], w[C-1], dw[C-1], rstd[N-1]
	k.Parallel(N, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			dy, x, dx := dout[n*C:n*C+C], inp[n*C:n*C+C], dinp[n*C:n*C+C]
			s := rstd[n]
			var gx float64
			for i := range x {
				gx += float64(w[i]*dy[i]) * float64(x[i]*s)
			}
			m := float32(gx / float64(C))
			for i := range x {
				dx[i] += s * (w[i]*dy[i] - x[i]*s*m)
			}
		}
	})
	chunks := colChunks(k.Threads(), C)
	k.Parallel(chunks, func(lo, hi int) {
		for c := lo; c < hi; c++ {
			c0, c1 := colChunk(c, chunks, C)
			for n := 0; n < N; n++ {
				s, dy, x := rstd[n], dout[n*C+c0:n*C+c1], inp[n*C+c0:n*C+c1]
				g := dw[c0:c1][:len(dy)]
				for i, v := range dy {
					g[i] += v * (x[i] * s)
				}
			}
		}
	})
}
