package ops

// EncoderForward embeds tokens: out[b,t,:] = wte[inp[b,t],:] + wpe[t,:].
//
//	out (B,T,C)   inp (B,T)   wte (V,C)   wpe (T,C)
//
// Token ids must lie in [0, V); the model checks them before calling.
func EncoderForward(k *Kernels, out []float32, inp []int32, wte, wpe []float32, B, T, C int) {
	k.Parallel(B*T, func(lo, hi int) {
		for bt := lo; bt < hi; bt++ {
			t := bt % T
			ix := int(inp[bt])
			o := out[bt*C : bt*C+C]
			we := wte[ix*C : ix*C+C]
			pe := wpe[t*C : t*C+C]
			for i := range o {
				o[i] = we[i] + pe[i]
			}
		}
	})
}

// EncoderBackward ACCUMULATES the embedding gradients:
//
//	dwte[inp[b,t],:] += dout[b,t,:]     dwpe[t,:] += dout[b,t,:]
//
//	dwte (V,C)   dwpe (T,C)   dout (B,T,C)   inp (B,T)
//
// Threads split the channels, so rows of dwte shared by repeated tokens are
// summed by one goroutine in (b,t) order: the result does not depend on
// the thread count.
func EncoderBackward(k *Kernels, dwte, dwpe, dout []float32, inp []int32, B, T, C int) {
	chunks := colChunks(k.Threads(), C)
	k.Parallel(chunks, func(lo, hi int) {
		for w := lo; w < hi; w++ {
			c0, c1 := colChunk(w, chunks, C)
			for bt := 0; bt < B*T; bt++ {
				t := bt % T
				ix := int(inp[bt])
				d := dout[bt*C+c0 : bt*C+c1]
				gw := dwte[ix*C+c0 : ix*C+c1]
				gp := dwpe[t*C+c0 : t*C+c1]
				gw = gw[:len(d)]
				gp = gp[:len(d)]
				for i, v := range d {
					gw[i] += v
					gp[i] += v
				}
			}
		}
	})
}
