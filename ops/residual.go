package ops

// ResidualForward adds two tensors: out = a + b. out may alias a or b.
//
//	out, a, b (n)
func ResidualForward(k *Kernels, out, a, b []float32, n int) {
	k.Parallel(n/1024+1, func(lo, hi int) {
		lo, hi = min(lo*1024, n), min(hi*1024, n)
		o, x, y := out[lo:hi], a[lo:hi], b[lo:hi]
		x, y = x[:len(o)], y[:len(o)]
		for i := range o {
			o[i] = x[i] + y[i]
		}
	})
}

// ResidualBackward ACCUMULATES the gradient of out = a + b into both
// inputs: da += dout, db += dout.
//
//	da, db, dout (n)
func ResidualBackward(k *Kernels, da, db, dout []float32, n int) {
	AddInto(k, da, dout, n)
	AddInto(k, db, dout, n)
}

// AddInto ACCUMULATES src into dst: dst += src. It is the backward of a
// tensor used twice (a residual branch point) and of a copy.
//
//	dst, src (n)
func AddInto(k *Kernels, dst, src []float32, n int) {
	v := k.simd()
	k.Parallel(n/1024+1, func(lo, hi int) {
		lo, hi = min(lo*1024, n), min(hi*1024, n)
		rowAxpy(v, dst[lo:hi], src[lo:hi], 1)
	})
}
