package comm

import (
	"math"

	"trellis/tensor"
)

// reduceBlock is the number of elements folded at a time in an L1-resident
// accumulator, so that every source streams through memory once.
const reduceBlock = 2048

// AvgScale is the factor Avg applies: fl32(1/n). The Avg result is the fp32
// sum times this factor (within 1 ulp of sum/n; exact when n is a power of 2).
func AvgScale(n int) float32 { return float32(1 / float64(n)) }

// Partition cuts n elements into p chunks whose sizes differ by at most
// one: chunk j is [b[j], b[j+1]) with b[j] = ⌊j·n/p⌋ (b[p] = n). The
// backends that reduce over the network (comm/tcp, comm/mpi) cut their
// buffers this way.
func Partition(n, p int) []int {
	b := make([]int, p+1)
	for j := range b {
		b[j] = j * n / p
	}
	return b
}

// Reduce folds srcs into dst (the reduction kernel shared by the backends).
// For every element i of dst it computes
//
//	dst[i] = s · (srcs[0][i] ⊕ srcs[1][i] ⊕ … ⊕ srcs[k-1][i])
//
// folding left to right in the order given (so the result does not depend on
// scheduling), where ⊕ is + for Sum and Avg and max for Max, and s = 1/avgOver
// when op is Avg and avgOver > 0, else 1. Pass avgOver = 0 for the partial
// steps of a multi-step algorithm and the group size on the last step.
//
// bf16 values are widened to fp32, folded in fp32 and rounded to bf16 once,
// when stored (round to nearest, ties to even). Max propagates NaN. dst may be
// one of the srcs (or share memory with them at the same offsets). Every src
// must hold at least dst.Len() elements of dst's dtype; anything else is a
// programming error and panics.
func Reduce(dst Buf, srcs []Buf, op ReduceOp, avgOver int) {
	ReduceTo([]Buf{dst}, srcs, op, avgOver)
}

// ReduceTo is Reduce storing the same result into every dst (all of one
// length and dtype). It works block by block — every source's block is read
// before any destination's is written — so the dsts may be the srcs: an
// in-place all-reduce over shared memory reads and writes each element once.
func ReduceTo(dsts, srcs []Buf, op ReduceOp, avgOver int) {
	if len(srcs) == 0 || len(dsts) == 0 {
		panic("comm: Reduce with no sources or no destinations")
	}
	scale := float32(1)
	if op == Avg && avgOver > 0 {
		scale = AvgScale(avgOver)
	}
	isMax := op == Max
	n := dsts[0].Len()
	kind := dsts[0].DType()
	for _, b := range append(dsts[1:len(dsts):len(dsts)], srcs...) {
		if b.DType() != kind || b.Len() < n {
			panic("comm: Reduce with mixed dtypes or short sources")
		}
	}
	switch kind {
	case tensor.F32:
		reduceF32(f32s(dsts, n), f32s(srcs, n), isMax, scale)
	case tensor.BF16:
		reduceBF16(bf16s(dsts, n), bf16s(srcs, n), isMax, scale)
	default:
		panic("comm: Reduce of " + kind.String())
	}
}

func f32s(bs []Buf, n int) [][]float32 {
	out := make([][]float32, len(bs))
	for i, b := range bs {
		out[i] = b.Float32s()[:n]
	}
	return out
}

func bf16s(bs []Buf, n int) [][]tensor.BF16Bits {
	out := make([][]tensor.BF16Bits, len(bs))
	for i, b := range bs {
		out[i] = b.BFloat16s()[:n]
	}
	return out
}

// fan is how many sources one pass folds. Sums fold up to fan sources per
// pass over an L1-resident block, padding with a block of −0, the exact
// identity of IEEE addition (x + −0 = x, also for x = −0); Max folds
// pairwise (it is rare and cheap).
const fan = 4

// pad4 returns srcs[k:k+fan] as fan slices, padded with zero (−0).
func pad4[T any](srcs [][]T, k int, zero []T) (a, b, c, d []T) {
	get := func(i int) []T {
		if k+i < len(srcs) {
			return srcs[k+i]
		}
		return zero
	}
	return get(0), get(1), get(2), get(3)
}

func reduceF32(dsts, srcs [][]float32, isMax bool, scale float32) {
	var acc, zero [reduceBlock]float32
	if len(srcs)%fan != 0 {
		for i := range zero {
			zero[i] = float32(math.Copysign(0, -1))
		}
	}
	n := len(dsts[0])
	sub := make([][]float32, len(srcs))
	for lo := 0; lo < n; lo += reduceBlock {
		hi := min(lo+reduceBlock, n)
		for k, s := range srcs {
			sub[k] = s[lo:hi]
		}
		out := dsts[0][lo:hi]
		switch {
		case isMax:
			a := acc[:hi-lo]
			copy(a, sub[0])
			for _, x := range sub[1:] {
				maxF32(a, x)
			}
			scaleCopyF32(out, a, scale)
		case len(sub) <= fan && scale == 1:
			x0, x1, x2, x3 := pad4(sub, 0, zero[:hi-lo])
			sum4F32(out, x0, x1, x2, x3) // every source is read before out is written
		default:
			a := acc[:hi-lo]
			x0, x1, x2, x3 := pad4(sub, 0, zero[:hi-lo])
			sum4F32(a, x0, x1, x2, x3)
			for k := fan; k < len(sub); k += fan {
				x0, x1, x2, x3 := pad4(sub, k, zero[:hi-lo])
				add4F32(a, x0, x1, x2, x3)
			}
			scaleCopyF32(out, a, scale)
		}
		for _, d := range dsts[1:] {
			copy(d[lo:hi], out)
		}
	}
}

// sum4F32 sets d[i] = ((x0[i] + x1[i]) + x2[i]) + x3[i]; d may alias any x.
// With AVX-512 sixteen lanes at a time (reduce_amd64.s), each in this order:
// the same bits.
func sum4F32(d, x0, x1, x2, x3 []float32) {
	n := len(d)
	x0, x1, x2, x3 = x0[:n], x1[:n], x2[:n], x3[:n]
	if haveAVX512 && n > 0 {
		sum4F32AVX512(&d[0], &x0[0], &x1[0], &x2[0], &x3[0], n)
		return
	}
	for i := range d {
		d[i] = x0[i] + x1[i] + x2[i] + x3[i]
	}
}

// add4F32 sets a[i] = (((a[i] + x0[i]) + x1[i]) + x2[i]) + x3[i].
func add4F32(a, x0, x1, x2, x3 []float32) {
	n := len(a)
	x0, x1, x2, x3 = x0[:n], x1[:n], x2[:n], x3[:n]
	if haveAVX512 && n > 0 {
		add4F32AVX512(&a[0], &x0[0], &x1[0], &x2[0], &x3[0], n)
		return
	}
	for i := range a {
		a[i] = a[i] + x0[i] + x1[i] + x2[i] + x3[i]
	}
}

// maxF32 sets a[i] = max(a[i], x[i]), NaN if either is NaN.
func maxF32(a, x []float32) {
	x = x[:len(a)]
	for i, b := range x {
		if b > a[i] || b != b {
			a[i] = b
		}
	}
}

// scaleCopyF32 sets d[i] = s·x[i] (a copy when s is 1).
func scaleCopyF32(d, x []float32, s float32) {
	if s == 1 {
		copy(d, x)
		return
	}
	x = x[:len(d)]
	if haveAVX512 && len(d) > 0 {
		scaleF32AVX512(&d[0], &x[0], len(d), s)
		return
	}
	for i := range d {
		d[i] = x[i] * s
	}
}

func reduceBF16(dsts, srcs [][]tensor.BF16Bits, isMax bool, scale float32) {
	var acc [reduceBlock]float32
	var zero [reduceBlock]tensor.BF16Bits
	if len(srcs)%fan != 0 {
		for i := range zero {
			zero[i] = 0x8000 // −0
		}
	}
	n := len(dsts[0])
	sub := make([][]tensor.BF16Bits, len(srcs))
	for lo := 0; lo < n; lo += reduceBlock {
		hi := min(lo+reduceBlock, n)
		for k, s := range srcs {
			sub[k] = s[lo:hi]
		}
		a, z := acc[:hi-lo], zero[:hi-lo]
		out := dsts[0][lo:hi]
		switch {
		case isMax:
			widenBF16(a, sub[0])
			for _, x := range sub[1:] {
				maxBF16(a, x)
			}
			roundBF16(out, a, scale)
		case len(sub) <= fan:
			x0, x1, x2, x3 := pad4(sub, 0, z)
			sum4RoundBF16(out, scale, x0, x1, x2, x3)
		default:
			x0, x1, x2, x3 := pad4(sub, 0, z)
			add4BF16(a, false, x0, x1, x2, x3)
			for k := fan; k < len(sub); k += fan {
				x0, x1, x2, x3 := pad4(sub, k, z)
				add4BF16(a, true, x0, x1, x2, x3)
			}
			roundBF16(out, a, scale)
		}
		for _, d := range dsts[1:] {
			copy(d[lo:hi], out)
		}
	}
}

// f32 widens a bf16 to fp32 exactly.
func f32(b tensor.BF16Bits) float32 { return math.Float32frombits(uint32(b) << 16) }

// bf16 rounds f to bf16, to nearest even, keeping NaN quiet (as
// tensor.ToBF16).
func bf16(f float32) tensor.BF16Bits {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return tensor.BF16Bits(u>>16 | 0x0040)
	}
	return tensor.BF16Bits((u + 0x7fff + (u>>16)&1) >> 16)
}

// add4BF16 sets a[i] = (((a[i] + x0[i]) + x1[i]) + x2[i]) + x3[i] in fp32,
// starting from 0 (not a) when !more.
func add4BF16(a []float32, more bool, x0, x1, x2, x3 []tensor.BF16Bits) {
	n := len(a)
	x0, x1, x2, x3 = x0[:n], x1[:n], x2[:n], x3[:n]
	if !more {
		for i := range a {
			a[i] = f32(x0[i]) + f32(x1[i]) + f32(x2[i]) + f32(x3[i])
		}
		return
	}
	for i := range a {
		a[i] = a[i] + f32(x0[i]) + f32(x1[i]) + f32(x2[i]) + f32(x3[i])
	}
}

// sum4RoundBF16 sets d[i] = bf16(s·(((x0[i] + x1[i]) + x2[i]) + x3[i])), the
// sum in fp32; d may alias any x.
func sum4RoundBF16(d []tensor.BF16Bits, s float32, x0, x1, x2, x3 []tensor.BF16Bits) {
	n := len(d)
	x0, x1, x2, x3 = x0[:n], x1[:n], x2[:n], x3[:n]
	for i := range d {
		d[i] = bf16(s * (f32(x0[i]) + f32(x1[i]) + f32(x2[i]) + f32(x3[i])))
	}
}

// widenBF16 sets a[i] = float32(x[i]) (exact).
func widenBF16(a []float32, x []tensor.BF16Bits) {
	x = x[:len(a)]
	for i := range a {
		a[i] = f32(x[i])
	}
}

// maxBF16 sets a[i] = max(a[i], float32(x[i])), NaN if either is NaN.
func maxBF16(a []float32, x []tensor.BF16Bits) {
	x = x[:len(a)]
	for i := range a {
		if b := f32(x[i]); b > a[i] || b != b {
			a[i] = b
		}
	}
}

// roundBF16 sets d[i] = bf16(s·a[i]).
func roundBF16(d []tensor.BF16Bits, a []float32, s float32) {
	a = a[:len(d)]
	for i := range d {
		d[i] = bf16(s * a[i])
	}
}
