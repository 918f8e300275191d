package ops

import "trellis/rng"

// Dropout drops elements with probability P and scales the survivors by
// 1/(1−P) (inverted dropout), so the expectation is unchanged. Whether
// element i is kept is a pure function of the stream and the element's
// global index Offset+i:
//
//	keep_i = Uniform(Stream, Offset+i) >= P
//
// so the mask needs no storage (the backward recomputes it) and does not
// depend on how the tensor is split across ranks or threads. Callers key
// Stream by (seed, step, layer/site) and set Offset to the global index of
// the first element (e.g. sample·T·C for a (B,T,C) activation whose first
// sequence is global sample `sample`).
type Dropout struct {
	Stream rng.Stream
	Offset uint64
	P      float32
}

// Forward sets out = inp⊙mask/(1−P). out may alias inp. With P = 0 it copies.
//
//	out, inp (n)
func (d Dropout) Forward(k *Kernels, out, inp []float32, n int) {
	d.apply(k, out, inp, n, false)
}

// Backward ACCUMULATES the gradient: dinp += dout⊙mask/(1−P).
//
//	dinp, dout (n)
func (d Dropout) Backward(k *Kernels, dinp, dout []float32, n int) {
	d.apply(k, dinp, dout, n, true)
}

// dropoutChunk is the number of elements a goroutine handles at a time; a
// multiple of 4 so that Philox blocks are never split between chunks.
const dropoutChunk = 4096

func (d Dropout) apply(k *Kernels, dst, src []float32, n int, accumulate bool) {
	scale := 1 / (1 - d.P)
	k.Parallel((n+dropoutChunk-1)/dropoutChunk, func(lo, hi int) {
		lo, hi = lo*dropoutChunk, min(hi*dropoutChunk, n)
		for i := lo; i < hi; {
			g := d.Offset + uint64(i)
			w := d.Stream.Block(g >> 2)
			for q := g & 3; q < 4 && i < hi; q++ {
				var v float32
				if rng.ToUniform(w[q]) >= d.P {
					v = src[i] * scale
				}
				if accumulate {
					dst[i] += v
				} else {
					dst[i] = v
				}
				i++
			}
		}
	})
}
