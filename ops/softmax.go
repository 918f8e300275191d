package ops

import "math"

// SoftmaxForward normalises each row of inp: out[n,:] = softmax(inp[n,:]),
// computed as exp(x − max x) / Σ exp(x − max x). out may alias inp.
//
//	out, inp (N,V)
func SoftmaxForward(k *Kernels, out, inp []float32, N, V int) {
	v := k.simd()
	k.Parallel(N, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			softmaxRow(v, out[n*V:n*V+V], inp[n*V:n*V+V], 1)
		}
	})
}

// SoftmaxBackward ACCUMULATES the gradient of SoftmaxForward, given its
// output y:
//
//	dinp[n,:] += y⊙(dout − Σ_v y[v]·dout[v])
//
//	dinp, dout, out (N,V)
func SoftmaxBackward(k *Kernels, dinp, dout, out []float32, N, V int) {
	k.Parallel(N, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			y, dy, dx := out[n*V:n*V+V], dout[n*V:n*V+V], dinp[n*V:n*V+V]
			dy, dx = dy[:len(y)], dx[:len(y)]
			s := dot32(y, dy)
			for i, p := range y {
				dx[i] += p * (dy[i] - s)
			}
		}
	})
}

// softmaxRow sets out = softmax(scale·in) for one non-empty row (scale >
// 0); out may alias in. It returns the maximum of scale·in and
// log Σ exp(scale·in − max), the log of the normaliser relative to it.
func softmaxRow(v bool, out, in []float32, scale float32) (maxv float32, logZ float32) {
	m, s := softmaxRowStats(v, out, in, scale)
	return m, float32(math.Log(float64(s)))
}

// softmaxRowStats sets out = softmax(scale·in) for one non-empty row
// (scale > 0; out may alias in) and returns m = max of scale·in and
// s = Σ exp(scale·in − m).
func softmaxRowStats(v bool, out, in []float32, scale float32) (m, s float32) {
	in = in[:len(out)]
	if v {
		var res [2]float32
		softmaxRowAVX512(&out[0], &in[0], len(out), scale, &res[0])
		return res[0], res[1]
	}
	m = rowMax(in) * scale
	s = rowExp(out, in, scale, m)
	rowScale(out, 1/s)
	return m, s
}

// expRow sets out = exp(x − shift) for one row (out may alias in) and
// returns Σ out: each exponential with the bits softmaxRow's has for the
// same argument on the same path.
func expRow(v bool, out, in []float32, shift float32) float32 {
	if len(out) == 0 {
		return 0
	}
	in = in[:len(out)]
	if v {
		var s float32
		expRowAVX512(&out[0], &in[0], len(out), shift, &s)
		return s
	}
	return rowExp(out, in, 1, shift)
}

// softmaxGradRow sets d = scale·p⊙(d − Σ p⊙d) for one non-empty row: d
// holds dL/dp for p = softmax(scale·x) and receives dL/dx.
func softmaxGradRow(v bool, d, p []float32, scale float32) {
	p = p[:len(d)]
	if v {
		softmaxGradRowAVX512(&d[0], &p[0], len(d), scale)
		return
	}
	rowSoftmaxGrad(d, p, dot32(p, d), scale)
}

// dot32 is Σ a[i]·b[i] with four partial sums.
func dot32(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}
