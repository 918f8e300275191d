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
	k.Parallel(N, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			x := inp[n*C : n*C+C]
			m := sum32(x) / float32(C)
			var v0, v1, v2, v3 float32
			i := 0
			for ; i+4 <= len(x); i += 4 {
				d0, d1, d2, d3 := x[i]-m, x[i+1]-m, x[i+2]-m, x[i+3]-m
				v0 += d0 * d0
				v1 += d1 * d1
				v2 += d2 * d2
				v3 += d3 * d3
			}
			for ; i < len(x); i++ {
				d := x[i] - m
				v0 += d * d
			}
			s := float32(1 / math.Sqrt(float64((v0+v1+v2+v3)/float32(C))+LayerNormEps))
			o := out[n*C : n*C+C]
			o = o[:len(x)]
			w, b := w[:len(x)], b[:len(x)]
			for i, xv := range x {
				o[i] = (xv-m)*s*w[i] + b[i]
			}
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
	k.Parallel(N, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			layerNormBackwardRow(dinp[n*C:n*C+C], dout[n*C:n*C+C], inp[n*C:n*C+C], w, mean[n], rstd[n])
		}
	})
	chunks := min(k.Threads(), max(1, C/16))
	k.Parallel(chunks, func(lo, hi int) {
		for c := lo; c < hi; c++ {
			c0, c1 := c*C/chunks, (c+1)*C/chunks
			for n := 0; n < N; n++ {
				m, s := mean[n], rstd[n]
				d := dout[n*C+c0 : n*C+c1]
				x := inp[n*C+c0 : n*C+c1]
				gw, gb := dw[c0:c1], db[c0:c1]
				x, gw, gb = x[:len(d)], gw[:len(d)], gb[:len(d)]
				for i, dv := range d {
					gw[i] += dv * (x[i] - m) * s
					gb[i] += dv
				}
			}
		}
	})
}

func layerNormBackwardRow(dx, dy, x, w []float32, m, s float32) {
	dx, x, w = dx[:len(dy)], x[:len(dy)], w[:len(dy)]
	var g, gx float32
	for i, d := range dy {
		gi := w[i] * d
		g += gi
		gx += gi * (x[i] - m) * s
	}
	c := float32(len(dy))
	g /= c
	gx /= c
	for i, d := range dy {
		xh := (x[i] - m) * s
		dx[i] += s * (w[i]*d - g - xh*gx)
	}
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
