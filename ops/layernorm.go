package ops

import "math"

// LayerNormEps is the ε of LayerNorm (PyTorch's default).
const LayerNormEps = 1e-5

// LayerNormForward normalises each row of inp over its C channels:
//
//	μ = mean(x),  σ² = mean((x−μ)²),  rstd = 1/√(σ²+ε)
//	out = (x−μ)·rstd·w + b
//
// and saves μ and rstd for the backward pass.
//
//	out, inp (N,C)   w, b (C)   mean, rstd (N)
func LayerNormForward(k *Kernels, out, mean, rstd, inp, w, b []float32, N, C int) {
	v := k.simd()
	if N == 0 || C == 0 {
		return
	}
	_, _, _, _, _ = out[N*C-1], inp[N*C-1], w[C-1], b[C-1], rstd[N-1] // the rows kernel stays inside
	_ = mean[N-1]
	k.Parallel(N, func(lo, hi int) {
		if v {
			lnFwdRowsAVX512(&out[lo*C], &inp[lo*C], &w[0], &b[0], &mean[lo], &rstd[lo], C, hi-lo)
			return
		}
		for n := lo; n < hi; n++ {
			x := inp[n*C : n*C+C]
			m := rowSum(x) / float32(C)
			s := float32(1 / math.Sqrt(float64(rowSqDev(x, m)/float32(C))+LayerNormEps))
			lnOutRow(out[n*C:n*C+C], x, w, b, m, s)
			mean[n], rstd[n] = m, s
		}
	})
}

// LayerNormBackward ACCUMULATES the gradients of LayerNormForward. With
// x̂ = (x−μ)·rstd and g = w⊙dout:
//
//	dinp += rstd·(g − mean(g) − x̂·mean(g⊙x̂))
//	dw   += Σ_rows dout⊙x̂        db += Σ_rows dout
//
//	dinp, dout, inp (N,C)   dw, db, w (C)   mean, rstd (N)
//
// dw and db are summed over rows in row order by threads that split the
// channels, so the result does not depend on the thread count.
func LayerNormBackward(k *Kernels, dinp, dw, db, dout, inp, w, mean, rstd []float32, N, C int) {
	v := k.simd()
	if N == 0 || C == 0 {
		return
	}
	_, _, _, _, _, _ = dinp[N*C-1], dout[N*C-1], inp[N*C-1], w[C-1], dw[C-1], db[C-1] // the rows kernel stays inside
	_, _ = mean[N-1], rstd[N-1]
	if v && k.Threads() == 1 { // one pass: the parameter sums in row order, as below
		lnBwdRowsAVX512(&dinp[0], &dout[0], &inp[0], &w[0], &mean[0], &rstd[0], &dw[0], &db[0], C, N)
		return
	}
	k.Parallel(N, func(lo, hi int) {
		if v {
			lnBwdRowsAVX512(&dinp[lo*C], &dout[lo*C], &inp[lo*C], &w[0], &mean[lo], &rstd[lo], nil, nil, C, hi-lo)
			return
		}
		for n := lo; n < hi; n++ {
			dy, x := dout[n*C:n*C+C], inp[n*C:n*C+C]
			g, gx := lnBwdSumsRow(dy, x, w, mean[n], rstd[n])
			lnBwdDxRow(dinp[n*C:n*C+C], dy, x, w, mean[n], rstd[n], g/float32(C), gx/float32(C))
		}
	})
	chunks := colChunks(k.Threads(), C)
	k.Parallel(chunks, func(lo, hi int) {
		for c := lo; c < hi; c++ {
			c0, c1 := colChunk(c, chunks, C)
			if v {
				lnBwdParamColsAVX512(&dw[c0], &db[c0], &dout[c0], &inp[c0], &mean[0], &rstd[0], c1-c0, N, C)
				continue
			}
			for n := 0; n < N; n++ {
				lnBwdParamsRow(dw[c0:c1], db[c0:c1], dout[n*C+c0:n*C+c1], inp[n*C+c0:n*C+c1], mean[n], rstd[n])
			}
		}
	})
}

// sum32 adds x with four partial sums.
func sum32(x []float32) float32 {
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += x[i]
		s1 += x[i+1]
		s2 += x[i+2]
		s3 += x[i+3]
	}
	for ; i < len(x); i++ {
		s0 += x[i]
	}
	return (s0 + s1) + (s2 + s3)
}
