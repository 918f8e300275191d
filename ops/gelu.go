package ops

// geluScale is √(2/π).
const geluScale = 0.7978845608028654

// GELUForward applies GPT-2's tanh approximation of GELU elementwise:
//
//	out = ½·x·(1 + tanh(s·(x + 0.044715·x³))),   s = √(2/π)
//
//	out, inp (n)
func GELUForward(k *Kernels, out, inp []float32, n int) {
	v := k.geluVec()
	k.Parallel(n/1024+1, func(lo, hi int) {
		lo, hi = min(lo*1024, n), min(hi*1024, n)
		geluForwardRange(v, out[lo:hi], inp[lo:hi])
	})
}

// GELUBackward ACCUMULATES the gradient of GELUForward: with
// u = s·(x + 0.044715·x³) and th = tanh(u),
//
//	dinp += dout·(½·(1+th) + ½·x·(1−th²)·s·(1 + 3·0.044715·x²))
//
//	dinp, inp, dout (n)
func GELUBackward(k *Kernels, dinp, inp, dout []float32, n int) {
	v := k.geluVec()
	k.Parallel(n/1024+1, func(lo, hi int) {
		lo, hi = min(lo*1024, n), min(hi*1024, n)
		geluBackwardRange(v, dinp[lo:hi], inp[lo:hi], dout[lo:hi], true)
	})
}

// GELUBackwardSet is GELUBackward except that it SETS
// dinp = dout·GELU'(inp) instead of accumulating: for a dinp buffer that
// holds nothing yet.
//
//	dinp, inp, dout (n)
func GELUBackwardSet(k *Kernels, dinp, inp, dout []float32, n int) {
	v := k.geluVec()
	k.Parallel(n/1024+1, func(lo, hi int) {
		lo, hi = min(lo*1024, n), min(hi*1024, n)
		geluBackwardRange(v, dinp[lo:hi], inp[lo:hi], dout[lo:hi], false)
	})
}
