package ops

import (
	"math"

	"trellis/tensor"
)

// The kernels of a mixture-of-experts layer (model/moe.go): the router's
// softmax, the grouped GEMM over the experts, and the moves of tokens
// between token order (N tokens, K slots each) and expert order (rows
// grouped by expert). The routing itself — which rows go where — is
// given as rows: rows[t·K+j] is the expert-order row of token t's j-th
// assignment, or −1 when it was dropped (an expert past its capacity).

// GroupedGemm runs the products gs, independent of each other (each C its
// own), as ONE call: a mixture-of-experts layer's per-expert GEMMs of
// different row counts. With at least as many products as threads each
// product runs on one goroutine, the products dealt to the threads by
// their flops (largest first, each to the least loaded), so that small
// experts do not leave threads idle; otherwise they run one after another
// on all threads. Every product is computed as Gemm computes it, whatever
// the thread count and schedule, so the results are those of the
// products one by one, bit for bit.
func (k *Kernels) GroupedGemm(gs []GEMM) {
	t := k.threads
	if t <= 1 || len(gs) < t {
		for _, g := range gs {
			k.Gemm(g)
		}
		return
	}
	one := k.Single()
	order := make([]int, len(gs))
	for i := range order {
		order[i] = i
	}
	flops := func(i int) int { return gs[i].M * gs[i].N * gs[i].K }
	// insertion sort by flops, descending (len(gs) is the local experts)
	for i := 1; i < len(order); i++ {
		for j := i; j > 0 && flops(order[j]) > flops(order[j-1]); j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
	load := make([]int, t)
	deal := make([][]int, t)
	for _, i := range order {
		w := 0
		for v := 1; v < t; v++ {
			if load[v] < load[w] {
				w = v
			}
		}
		load[w] += flops(i)
		deal[w] = append(deal[w], i)
	}
	parallel(t, t, func(lo, hi int) {
		for w := lo; w < hi; w++ {
			for _, i := range deal[w] {
				one.Gemm(gs[i])
			}
		}
	})
}

// RouterSoftmax is probs[n,:] = softmax(logits[n,:]) over E experts (in
// place allowed), in float64 sums for a result independent of E's
// blocking.
func (k *Kernels) RouterSoftmax(probs, logits []float32, N, E int) {
	k.Parallel(N, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			in, out := logits[n*E:(n+1)*E], probs[n*E:(n+1)*E]
			mx := in[0]
			for _, v := range in[1:] {
				mx = max(mx, v)
			}
			var s float64
			for e, v := range in {
				x := math.Exp(float64(v - mx))
				out[e] = float32(x)
				s += x
			}
			inv := 1 / s
			for e := range out {
				out[e] = float32(float64(out[e]) * inv)
			}
		}
	})
}

// RouterSoftmaxBackwardSet SETS dlogits = p ⊙ (dp − Σ_e p·dp) row by row
// (in place over dp allowed).
func (k *Kernels) RouterSoftmaxBackwardSet(dlogits, probs, dprobs []float32, N, E int) {
	k.Parallel(N, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			p, dp, dl := probs[n*E:(n+1)*E], dprobs[n*E:(n+1)*E], dlogits[n*E:(n+1)*E]
			var s float64
			for e := range p {
				s += float64(p[e]) * float64(dp[e])
			}
			for e := range p {
				dl[e] = float32(float64(p[e]) * (float64(dp[e]) - s))
			}
		}
	})
}

// RouterSigmoid is probs = σ(logits) element-wise (DeepSeek-V3's router
// scores; in place allowed).
func (k *Kernels) RouterSigmoid(probs, logits []float32, N, E int) {
	for i, v := range logits[:N*E] {
		probs[i] = float32(1 / (1 + math.Exp(-float64(v))))
	}
}

// RouterSigmoidBackwardSet SETS dlogits = dp ⊙ s ⊙ (1 − s) for the scores s
// (in place over dp allowed).
func (k *Kernels) RouterSigmoidBackwardSet(dlogits, probs, dprobs []float32, N, E int) {
	for i, s := range probs[:N*E] {
		dlogits[i] = dprobs[i] * s * (1 - s)
	}
}

// MoEDispatch copies token rows into expert order: dst row rows[t·K+j] =
// src row t (C wide) for every kept assignment, in src's dtype (dst and
// src of one dtype; a 16-bit row is copied bit for bit).
func (k *Kernels) MoEDispatch(dst, src tensor.Buf, rows []int32, N, K, C int) {
	if dst.DType() != src.DType() {
		panic("ops: MoEDispatch of " + src.DType().String() + " into " + dst.DType().String())
	}
	k.Parallel(N, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			for j := 0; j < K; j++ {
				r := int(rows[t*K+j])
				if r < 0 {
					continue
				}
				if src.DType() == tensor.F32 {
					copy(dst.F32()[r*C:(r+1)*C], src.F32()[t*C:(t+1)*C])
				} else {
					copy(dst.Bits()[r*C:(r+1)*C], src.Bits()[t*C:(t+1)*C])
				}
			}
		}
	})
}

// MoECombine ACCUMULATES out[t,:] += Σ_j gates[t·K+j]·y[rows[t·K+j],:]
// over token t's kept assignments in slot order j = 0..K−1 (gates nil:
// weight 1, the un-permutation of an input gradient). The order of the
// sum is the token's, not the experts', so any split of the experts gives
// the same bits.
func (k *Kernels) MoECombine(out, y []float32, gates []float32, rows []int32, N, K, C int) {
	k.Parallel(N, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			o := out[t*C : (t+1)*C]
			for j := 0; j < K; j++ {
				r := int(rows[t*K+j])
				if r < 0 {
					continue
				}
				yr := y[r*C : (r+1)*C]
				if gates == nil {
					for c := range o {
						o[c] += yr[c]
					}
					continue
				}
				g := gates[t*K+j]
				for c := range o {
					o[c] += g * yr[c]
				}
			}
		}
	})
}

// MoECombineBackward is MoECombine's backward for the output gradient dy
// (N,C): it SETS dyr[rows[t·K+j],:] = gates[t·K+j]·dy[t,:] (the experts'
// output gradients, expert order) and dgates[t·K+j] = dy[t,:]·y[rows[t·K+j],:]
// (0 for a dropped assignment).
func (k *Kernels) MoECombineBackward(dyr, dgates, dy, y, gates []float32, rows []int32, N, K, C int) {
	k.Parallel(N, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			d := dy[t*C : (t+1)*C]
			for j := 0; j < K; j++ {
				r := int(rows[t*K+j])
				if r < 0 {
					dgates[t*K+j] = 0
					continue
				}
				g := gates[t*K+j]
				dr, yr := dyr[r*C:(r+1)*C], y[r*C:(r+1)*C]
				var s float64
				for c := range d {
					dr[c] = g * d[c]
					s += float64(d[c]) * float64(yr[c])
				}
				dgates[t*K+j] = float32(s)
			}
		}
	})
}
