package ops

import (
	"fmt"
	"math"
)

// AdamWHyper holds the hyperparameters of one AdamW update.
type AdamWHyper struct {
	LR          float32 // learning rate η of this step
	Beta1       float32 // β1, decay of the first moment, in [0,1)
	Beta2       float32 // β2, decay of the second moment, in [0,1)
	Eps         float32 // ε added to √v̂
	WeightDecay float32 // λ, decoupled weight decay
	// GradScale s multiplies every gradient before it is used (gradient
	// clipping folded into the update); set it to 1 for plain AdamW.
	GradScale float32
	Step      int // t, the 1-based number of this update, for bias correction
}

// AdamW applies one AdamW update (Loshchilov & Hutter, decoupled weight
// decay, with Adam's bias correction) in place, element by element:
//
//	m ← β1·m + (1−β1)·g
//	v ← β2·v + (1−β2)·g²
//	m̂ = m / (1−β1ᵗ),  v̂ = v / (1−β2ᵗ)
//	p ← p − η·( m̂ / (√v̂ + ε) + λ·p )
//
// with t = step ≥ 1 the number of this update. The decay term uses p before
// the update (as PyTorch's AdamW and llm.c do). params, grads, m and v must
// have one length; m and v start at zero. Arithmetic is fp32; the bias
// corrections are computed in fp64 and rounded once.
func AdamW(params, grads, m, v []float32, lr, beta1, beta2, eps, weightDecay float32, step int) {
	AdamWUpdate(AdamWHyper{LR: lr, Beta1: beta1, Beta2: beta2, Eps: eps, WeightDecay: weightDecay, GradScale: 1, Step: step},
		params, grads, m, v)
}

// AdamWUpdate is AdamW with the hyperparameters in a struct and a gradient
// scale: g is replaced by GradScale·g throughout. It runs on the
// calling goroutine.
func AdamWUpdate(h AdamWHyper, params, grads, m, v []float32) {
	c := h.coefficients(len(params), len(grads), len(m), len(v))
	c.apply(haveAVX512, params, grads, m, v)
}

// AdamW is the multi-threaded AdamWUpdate: the slices are split into
// contiguous chunks, one per thread. The update is element-wise, so the result
// is bit-identical for every thread count.
func (k *Kernels) AdamW(h AdamWHyper, params, grads, m, v []float32) {
	c := h.coefficients(len(params), len(grads), len(m), len(v))
	const grain = 1 << 14 // elements below which a goroutine does not pay
	n := len(params)
	chunks := (n + grain - 1) / grain
	simd := k.simd()
	k.Parallel(chunks, func(lo, hi int) {
		a, b := lo*grain, min(hi*grain, n)
		c.apply(simd, params[a:b], grads[a:b], m[a:b], v[a:b])
	})
}

// adamwCoef holds the per-step constants of the update in fp32. The
// AVX-512 kernel reads them as consecutive float32s in this order.
type adamwCoef struct {
	lr, b1, b2, ob1, ob2, eps, wd, s, bc1, bc2 float32
}

// coefficients checks the arguments (a violation is a programming error and
// panics) and precomputes the bias corrections 1/(1−βᵗ) in fp64.
func (h AdamWHyper) coefficients(np, ng, nm, nv int) adamwCoef {
	if ng != np || nm != np || nv != np {
		panic(fmt.Sprintf("ops: AdamW: lengths differ: params %d, grads %d, m %d, v %d", np, ng, nm, nv))
	}
	if h.Step < 1 {
		panic(fmt.Sprintf("ops: AdamW: step=%d must be >= 1", h.Step))
	}
	bc1 := 1 / (1 - math.Pow(float64(h.Beta1), float64(h.Step)))
	bc2 := 1 / (1 - math.Pow(float64(h.Beta2), float64(h.Step)))
	return adamwCoef{
		lr: h.LR, b1: h.Beta1, b2: h.Beta2, ob1: 1 - h.Beta1, ob2: 1 - h.Beta2,
		eps: h.Eps, wd: h.WeightDecay, s: h.GradScale, bc1: float32(bc1), bc2: float32(bc2),
	}
}

// apply runs the update over equal-length slices, the multiple-of-16 part
// in AVX-512 if v (same operations, same bits).
func (c adamwCoef) apply(simd bool, params, grads, m, v []float32) {
	grads, m, v = grads[:len(params)], m[:len(params)], v[:len(params)]
	if n := vecLen(simd, len(params)); n > 0 {
		adamwAVX512(&params[0], &grads[0], &m[0], &v[0], n, &c.lr)
		params, grads, m, v = params[n:], grads[n:], m[n:], v[n:]
	}
	for i, p := range params {
		g := grads[i] * c.s
		mi := c.b1*m[i] + c.ob1*g
		vi := c.b2*v[i] + c.ob2*(g*g)
		m[i], v[i] = mi, vi
		mh := mi * c.bc1
		vh := vi * c.bc2
		params[i] = p - c.lr*(mh/(float32(math.Sqrt(float64(vh)))+c.eps)+c.wd*p)
	}
}
