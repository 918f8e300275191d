package ops

// LinearForward is a dense layer with weights in PyTorch's (out, in) layout:
//
//	out = inp·wᵀ + bias
//
//	out (N,OC)   inp (N,C)   w (OC,C)   bias (OC) or nil for none
//
// The bias is added as the matmul stores its tiles (the same rounding as
// filling out with the bias and accumulating the product on top).
func LinearForward(k *Kernels, out, inp, w, bias []float32, N, C, OC int) {
	k.matMulEp(NT, N, OC, C, inp, C, w, C, out, OC, nil, bias)
}

// LinearResidualForward fuses a dense layer with the residual add that
// follows it in a pre-LN block:
//
//	out = res + inp·wᵀ + bias
//
//	out, res (N,OC)   inp (N,C)   w (OC,C)   bias (OC) or nil
//
// out may alias res. res + bias is rounded first, then the product added,
// as the matmul stores its tiles: one pass over out.
func LinearResidualForward(k *Kernels, out, res, inp, w, bias []float32, N, C, OC int) {
	k.matMulEp(NT, N, OC, C, inp, C, w, C, out, OC, res, bias)
}

// LinearBackward ACCUMULATES the gradients of out = inp·wᵀ + bias:
//
//	dinp  += dout·w            (N,C)   skipped when dinp is nil
//	dw    += doutᵀ·inp         (OC,C)
//	dbias += Σ_rows dout       (OC)    skipped when dbias is nil
//
//	dout (N,OC)   inp (N,C)   w (OC,C)
func LinearBackward(k *Kernels, dinp, dw, dbias, dout, inp, w []float32, N, C, OC int) {
	if dinp != nil {
		k.MatMul(NN, N, C, OC, dout, OC, w, C, dinp, C, true)
	}
	k.MatMul(TN, OC, C, N, dout, OC, inp, C, dw, C, true)
	if dbias != nil {
		BiasBackward(k, dbias, dout, N, OC)
	}
}

// LinearBackwardSet is LinearBackward except that it SETS dinp = dout·w
// instead of accumulating into it (dw and dbias still ACCUMULATE). Use it
// when dinp holds nothing yet: it saves zeroing the buffer first.
//
//	dinp (N,C)   dw (OC,C)   dbias (OC) or nil   dout (N,OC)   inp (N,C)   w (OC,C)
func LinearBackwardSet(k *Kernels, dinp, dw, dbias, dout, inp, w []float32, N, C, OC int) {
	k.MatMul(NN, N, C, OC, dout, OC, w, C, dinp, C, false)
	LinearBackward(k, nil, dw, dbias, dout, inp, w, N, C, OC)
}

// BiasForward broadcasts a bias over rows: out[n,:] = res[n,:] + bias, with
// res = 0 when nil and bias = 0 when nil. out may alias res.
//
//	out, res (N,OC)   bias (OC)
func BiasForward(k *Kernels, out, res, bias []float32, N, OC int) {
	k.Parallel(N, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			o := out[n*OC : n*OC+OC]
			switch {
			case res == nil && bias == nil:
				clear(o)
			case res == nil:
				copy(o, bias[:OC])
			case bias == nil:
				copy(o, res[n*OC:n*OC+OC])
			default:
				r, b := res[n*OC:n*OC+OC], bias[:OC]
				r, b = r[:len(o)], b[:len(o)]
				for i := range o {
					o[i] = r[i] + b[i]
				}
			}
		}
	})
}

// BiasBackward ACCUMULATES the bias gradient: dbias += Σ_n dout[n,:].
// Threads split the channels and sum rows in order, so the result does not
// depend on the thread count.
//
//	dbias (OC)   dout (N,OC)
func BiasBackward(k *Kernels, dbias, dout []float32, N, OC int) {
	v := k.simd()
	chunks := colChunks(k.Threads(), OC)
	k.Parallel(chunks, func(lo, hi int) {
		for c := lo; c < hi; c++ {
			c0, c1 := colChunk(c, chunks, OC)
			for n := 0; n < N; n++ {
				rowAxpy(v, dbias[c0:c1], dout[n*OC+c0:n*OC+c1], 1)
			}
		}
	})
}
