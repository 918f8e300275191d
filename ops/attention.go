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

// The attention kernels take grouped-query attention's layout (Ainslie et
// al. 2023): NH query heads of HS = C/NH channels share KV key/value heads
// (KV divides NH; KV = NH is multi-head attention, KV = 1 multi-query), in
// rows of qkv (B,T,(NH+2·KV)·HS) laid out
//
//	[q (NH·HS) | k (KV·HS) | v (KV·HS)]
//
// query head h reading key/value head ⌊h/G⌋, G = NH/KV. A key/value head
// and its G query heads run on one worker, which reads the shared k and v
// in place (the tiled paths pack them once for the group), so the
// backward accumulates dK and dV over the group without a race; the
// (b, key/value head) pairs run in parallel.

// AttentionForward is multi-head causal self-attention with materialised
// scores. For each batch b and query head h, with Q the (T,HS) slice of
// qkv at q channels [h·HS, (h+1)·HS) and K, V those of key/value head ⌊h/G⌋:
//
//	att = softmax(mask(Q·Kᵀ/√HS))     (row i attends to keys 0..i; later keys get 0)
//	out[b,:,h·HS:(h+1)·HS] = att·V
//
//	out (B,T,C)   att (B,NH,T,T) saved for the backward   qkv (B,T,(NH+2·KV)·HS)
//
// Each head runs single-threaded matmuls that read qkv through strides
// (no permute).
func AttentionForward(k *Kernels, out, att, qkv []float32, B, T, C, NH, KV int) {
	attnCheck(qkv, out, att, B, T, C, NH, KV)
	g := newAttnGeom(k, T, C, NH, KV)
	forEachGroup(k, B*KV, func(ks *Kernels, w, bg int) {
		if g.tiled {
			g.groupForwardTiled(ks, out, att, qkv, bg)
			return
		}
		for bh := range g.heads(bg) {
			g.headForward(ks, out, att, qkv, bh)
		}
	})
}

// AttentionBackward ACCUMULATES the gradient of AttentionForward into dqkv.
// With dY the head's slice of dout and P its saved probabilities:
//
//	dV += Pᵀ·dY     dP = dY·Vᵀ     dS = P⊙(dP − rowsum(P⊙dP))/√HS
//	dQ += dS·K      dK += dSᵀ·Q
//
// (dK and dV summed over the G query heads that share them)
//
//	dqkv (B,T,(NH+2·KV)·HS)   dout (B,T,C)   qkv (B,T,(NH+2·KV)·HS)   att (B,NH,T,T)
//	scratch: AttentionScratchSize(k, B, T, KV) floats, overwritten
func AttentionBackward(k *Kernels, dqkv, scratch, dout, qkv, att []float32, B, T, C, NH, KV int) {
	attentionBackward(k, dqkv, scratch, dout, qkv, att, B, T, C, NH, KV, true)
}

// AttentionBackwardSet is AttentionBackward except that it SETS dqkv to
// the gradient instead of accumulating into it: for a dqkv buffer that
// holds nothing yet (it saves zeroing it first).
func AttentionBackwardSet(k *Kernels, dqkv, scratch, dout, qkv, att []float32, B, T, C, NH, KV int) {
	attentionBackward(k, dqkv, scratch, dout, qkv, att, B, T, C, NH, KV, false)
}

func attentionBackward(k *Kernels, dqkv, scratch, dout, qkv, att []float32, B, T, C, NH, KV int, acc bool) {
	attnCheck(qkv, dout, att, B, T, C, NH, KV)
	g := newAttnGeom(k, T, C, NH, KV)
	if len(dqkv) < B*T*g.ld || len(scratch) < AttentionScratchSize(k, B, T, KV) {
		panic(fmt.Sprintf("ops: AttentionBackward: dqkv %d or scratch %d too short", len(dqkv), len(scratch)))
	}
	if !acc && !g.tiled {
		clear(dqkv[:B*T*g.ld])
		acc = true
	}
	per := T * T
	forEachGroup(k, B*KV, func(ks *Kernels, w, bg int) {
		ds := scratch[w*per : (w+1)*per]
		if g.tiled {
			g.groupBackwardTiled(ks, dqkv, ds, dout, qkv, att, bg, acc)
			return
		}
		for bh := range g.heads(bg) {
			g.headBackward(ks, dqkv, ds, dout, qkv, att, bh)
		}
	})
}

// AttentionScratchSize is the number of floats AttentionBackward needs as
// scratch: the score gradients of one head, (T,T), per worker, for KV
// key/value heads (a worker runs one (b, key/value head) at a time).
func AttentionScratchSize(k *Kernels, B, T, KV int) int {
	return attnWorkers(k, B*KV) * T * T
}

func attnWorkers(k *Kernels, n int) int { return max(1, min(k.Threads(), n)) }

// forEachGroup runs fn(kernels, worker, bg) for bg in [0, n), splitting the
// range into one contiguous part per worker.
func forEachGroup(k *Kernels, n int, fn func(ks *Kernels, w, bg int)) {
	workers := attnWorkers(k, n)
	ks := k.Single()
	k.Parallel(workers, func(lo, hi int) {
		for w := lo; w < hi; w++ {
			for bg := w * n / workers; bg < (w+1)*n/workers; bg++ {
				fn(ks, w, bg)
			}
		}
	})
}

type attnGeom struct {
	T, C, NH, HS int     // C = NH·HS, the query (and output) width
	KV, G        int     // key/value heads and the query heads per group, NH/KV
	ld           int     // qkv's row stride, (NH+2·KV)·HS
	scale        float32 // 1/√HS
	simd         bool
	tiled        bool // the path of attention_tiled.go
}

func newAttnGeom(k *Kernels, T, C, NH, KV int) attnGeom {
	HS := C / NH
	return attnGeom{T: T, C: C, NH: NH, HS: HS, KV: KV, G: NH / KV, ld: C + 2*KV*HS,
		scale: float32(1 / math.Sqrt(float64(HS))), simd: k.simd(), tiled: tiledAttn(k, HS)}
}

// heads are the (b, query head) numbers bh = b·NH + h of group bg =
// b·KV + j: the G query heads of key/value head j.
func (g attnGeom) heads(bg int) func(yield func(int) bool) {
	b, j := bg/g.KV, bg%g.KV
	return func(yield func(int) bool) {
		for h := j * g.G; h < (j+1)*g.G; h++ {
			if !yield(b*g.NH + h) {
				return
			}
		}
	}
}

// kv returns group bg's K and V (row stride ld).
func (g attnGeom) kv(qkv []float32, bg int) (kk, v []float32) {
	b, j := bg/g.KV, bg%g.KV
	base := b*g.T*g.ld + g.C + j*g.HS
	return qkv[base:], qkv[base+g.KV*g.HS:]
}

// slices returns head bh's Q and its group's K, V (row stride ld), its
// output or output gradient column block (row stride C), and its (T,T)
// probabilities.
func (g attnGeom) slices(qkv, out, att []float32, bh int) (q, kk, v, o, a []float32) {
	b, h := bh/g.NH, bh%g.NH
	kk, v = g.kv(qkv, b*g.KV+h/g.G)
	return qkv[b*g.T*g.ld+h*g.HS:], kk, v, out[b*g.T*g.C+h*g.HS:], att[bh*g.T*g.T : (bh+1)*g.T*g.T]
}

func (g attnGeom) headForward(k *Kernels, out, att, qkv []float32, bh int) {
	T, ld, HS := g.T, g.ld, g.HS
	q, kk, v, o, a := g.slices(qkv, out, att, bh)
	for i0 := 0; i0 < T; i0 += attnBlock {
		i1 := min(i0+attnBlock, T)
		// S[i0:i1, 0:i1] = Q[i0:i1]·K[0:i1]ᵀ
		k.MatMul(NT, i1-i0, i1, HS, q[i0*ld:], ld, kk, ld, a[i0*T:], T, false)
		for i := i0; i < i1; i++ {
			row := a[i*T : i*T+T]
			softmaxRow(g.simd, row[:i+1], row[:i+1], g.scale)
			clear(row[i+1:])
		}
		// Y[i0:i1] = P[i0:i1, 0:i1]·V[0:i1]
		k.MatMul(NN, i1-i0, HS, i1, a[i0*T:], T, v, ld, o[i0*g.C:], g.C, false)
	}
}

// headBackward ACCUMULATES head bh's gradients into dqkv (its dQ, its
// group's dK and dV).
func (g attnGeom) headBackward(k *Kernels, dqkv, dp, dout, qkv, att []float32, bh int) {
	T, ld, HS := g.T, g.ld, g.HS
	q, kk, v, dy, a := g.slices(qkv, dout, att, bh)
	dq, dk, dv, _, _ := g.slices(dqkv, dout, att, bh)
	for i0 := 0; i0 < T; i0 += attnBlock {
		i1 := min(i0+attnBlock, T)
		pb := a[i0*T:]
		// dP[0:i1-i0, 0:i1] = dY[i0:i1]·V[0:i1]ᵀ
		k.MatMul(NT, i1-i0, i1, HS, dy[i0*g.C:], g.C, v, ld, dp, T, false)
		// dV[0:i1] += P[i0:i1, 0:i1]ᵀ·dY[i0:i1]
		k.MatMul(TN, i1, HS, i1-i0, pb, T, dy[i0*g.C:], g.C, dv, ld, true)
		for i := i0; i < i1; i++ {
			p := a[i*T : i*T+i+1]
			d := dp[(i-i0)*T : (i-i0)*T+i1]
			softmaxGradRow(g.simd, d[:i+1], p, g.scale)
			clear(d[i+1:])
		}
		// dQ[i0:i1] += dS·K[0:i1]
		k.MatMul(NN, i1-i0, HS, i1, dp, T, kk, ld, dq[i0*ld:], ld, true)
		// dK[0:i1] += dSᵀ·Q[i0:i1]
		k.MatMul(TN, i1, HS, i1-i0, dp, T, q[i0*ld:], ld, dk, ld, true)
	}
}
