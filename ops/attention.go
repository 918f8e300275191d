package ops

import (
	"fmt"
	"math"
)

// attnBlock is the number of query rows handled together. Causal attention
// only needs keys 0..i for query i, so a block of rows [i0, i1) multiplies
// against keys [0, i1) only: with T = 256 this does 5/8 of the work of full
// (T,T) products.
const attnBlock = 64

// AttentionForward is multi-head causal self-attention with materialised
// scores. For each batch b and head h, with Q, K, V the (T,HS) slices of
// qkv at channels [h·HS, (h+1)·HS) of the q, k and v thirds:
//
//	att = softmax(mask(Q·Kᵀ/√HS))     (row i attends to keys 0..i; later keys get 0)
//	out[b,:,h·HS:(h+1)·HS] = att·V
//
//	out (B,T,C)   att (B,NH,T,T) saved for the backward   qkv (B,T,3C)
//
// The (b,h) pairs run in parallel, each with single-threaded matmuls that
// read qkv through strides (no permute).
func AttentionForward(k *Kernels, out, att, qkv []float32, B, T, C, NH int) {
	attnCheck(qkv, out, att, B, T, C, NH)
	g := newAttnGeom(k, T, C, NH)
	forEachHead(k, B*NH, func(ks *Kernels, w, bh int) {
		if g.tiled {
			g.headForwardTiled(ks, out, att, qkv, bh)
			return
		}
		g.headForward(ks, out, att, qkv, bh)
	})
}

// AttentionBackward ACCUMULATES the gradient of AttentionForward into dqkv.
// With dY the head's slice of dout and P its saved probabilities:
//
//	dV += Pᵀ·dY     dP = dY·Vᵀ     dS = P⊙(dP − rowsum(P⊙dP))/√HS
//	dQ += dS·K      dK += dSᵀ·Q
//
//	dqkv (B,T,3C)   dout (B,T,C)   qkv (B,T,3C)   att (B,NH,T,T)
//	scratch: AttentionScratchSize(k, B, T, NH) floats, overwritten
func AttentionBackward(k *Kernels, dqkv, scratch, dout, qkv, att []float32, B, T, C, NH int) {
	attentionBackward(k, dqkv, scratch, dout, qkv, att, B, T, C, NH, true)
}

// AttentionBackwardSet is AttentionBackward except that it SETS dqkv to
// the gradient instead of accumulating into it: for a dqkv buffer that
// holds nothing yet (it saves zeroing it first).
func AttentionBackwardSet(k *Kernels, dqkv, scratch, dout, qkv, att []float32, B, T, C, NH int) {
	attentionBackward(k, dqkv, scratch, dout, qkv, att, B, T, C, NH, false)
}

func attentionBackward(k *Kernels, dqkv, scratch, dout, qkv, att []float32, B, T, C, NH int, acc bool) {
	attnCheck(qkv, dout, att, B, T, C, NH)
	if len(dqkv) < B*T*3*C || len(scratch) < AttentionScratchSize(k, B, T, NH) {
		panic(fmt.Sprintf("ops: AttentionBackward: dqkv %d or scratch %d too short", len(dqkv), len(scratch)))
	}
	g := newAttnGeom(k, T, C, NH)
	if !acc && !g.tiled {
		clear(dqkv[:B*T*3*C])
		acc = true
	}
	per := T * T
	forEachHead(k, B*NH, func(ks *Kernels, w, bh int) {
		ds := scratch[w*per : (w+1)*per]
		if g.tiled {
			g.headBackwardTiled(ks, dqkv, ds, dout, qkv, att, bh, acc)
			return
		}
		g.headBackward(ks, dqkv, ds, dout, qkv, att, bh)
	})
}

// AttentionScratchSize is the number of floats AttentionBackward needs as
// scratch: the score gradients of one head, (T,T), per worker.
func AttentionScratchSize(k *Kernels, B, T, NH int) int {
	return attnWorkers(k, B*NH) * T * T
}

func attnWorkers(k *Kernels, bh int) int { return max(1, min(k.Threads(), bh)) }

// forEachHead runs fn(kernels, worker, bh) for bh in [0, n), splitting the
// range into one contiguous part per worker.
func forEachHead(k *Kernels, n int, fn func(ks *Kernels, w, bh int)) {
	workers := attnWorkers(k, n)
	ks := k.Single()
	k.Parallel(workers, func(lo, hi int) {
		for w := lo; w < hi; w++ {
			for bh := w * n / workers; bh < (w+1)*n/workers; bh++ {
				fn(ks, w, bh)
			}
		}
	})
}

type attnGeom struct {
	T, C, NH, HS int
	scale        float32 // 1/√HS
	simd         bool
	tiled        bool // the path of attention_tiled.go
}

func newAttnGeom(k *Kernels, T, C, NH int) attnGeom {
	HS := C / NH
	return attnGeom{T: T, C: C, NH: NH, HS: HS, scale: float32(1 / math.Sqrt(float64(HS))), simd: k.simd(), tiled: tiledAttn(k, HS)}
}

// slices returns the head's Q, K, V (row stride 3C), its output or output
// gradient column block (row stride C), and its (T,T) probabilities.
func (g attnGeom) slices(qkv, out, att []float32, bh int) (q, kk, v, o, a []float32) {
	b, h := bh/g.NH, bh%g.NH
	base := b*g.T*3*g.C + h*g.HS
	return qkv[base:], qkv[base+g.C:], qkv[base+2*g.C:], out[b*g.T*g.C+h*g.HS:], att[bh*g.T*g.T : (bh+1)*g.T*g.T]
}

func (g attnGeom) headForward(k *Kernels, out, att, qkv []float32, bh int) {
	T, C3, HS := g.T, 3*g.C, g.HS
	q, kk, v, o, a := g.slices(qkv, out, att, bh)
	for i0 := 0; i0 < T; i0 += attnBlock {
		i1 := min(i0+attnBlock, T)
		// S[i0:i1, 0:i1] = Q[i0:i1]·K[0:i1]ᵀ
		k.MatMul(NT, i1-i0, i1, HS, q[i0*C3:], C3, kk, C3, a[i0*T:], T, false)
		for i := i0; i < i1; i++ {
			row := a[i*T : i*T+T]
			softmaxRow(g.simd, row[:i+1], row[:i+1], g.scale)
			clear(row[i+1:])
		}
		// Y[i0:i1] = P[i0:i1, 0:i1]·V[0:i1]
		k.MatMul(NN, i1-i0, HS, i1, a[i0*T:], T, v, C3, o[i0*g.C:], g.C, false)
	}
}

func (g attnGeom) headBackward(k *Kernels, dqkv, dp, dout, qkv, att []float32, bh int) {
	T, C3, HS := g.T, 3*g.C, g.HS
	q, kk, v, dy, a := g.slices(qkv, dout, att, bh)
	dq, dk, dv, _, _ := g.slices(dqkv, dout, att, bh)
	for i0 := 0; i0 < T; i0 += attnBlock {
		i1 := min(i0+attnBlock, T)
		pb := a[i0*T:]
		// dP[0:i1-i0, 0:i1] = dY[i0:i1]·V[0:i1]ᵀ
		k.MatMul(NT, i1-i0, i1, HS, dy[i0*g.C:], g.C, v, C3, dp, T, false)
		// dV[0:i1] += P[i0:i1, 0:i1]ᵀ·dY[i0:i1]
		k.MatMul(TN, i1, HS, i1-i0, pb, T, dy[i0*g.C:], g.C, dv, C3, true)
		for i := i0; i < i1; i++ {
			p := a[i*T : i*T+i+1]
			d := dp[(i-i0)*T : (i-i0)*T+i1]
			softmaxGradRow(g.simd, d[:i+1], p, g.scale)
			clear(d[i+1:])
		}
		// dQ[i0:i1] += dS·K[0:i1]
		k.MatMul(NN, i1-i0, HS, i1, dp, T, kk, C3, dq[i0*C3:], C3, true)
		// dK[0:i1] += dSᵀ·Q[i0:i1]
		k.MatMul(TN, i1, HS, i1-i0, dp, T, q[i0*C3:], C3, dk, C3, true)
	}
}
