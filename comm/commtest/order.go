package commtest

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"trellis/comm"
	"trellis/tensor"
)

// Rank order. Every backend's all-reduce and reduce-scatter give bit for bit
// what comm/local gives: for every element, comm.Reduce of the p ranks'
// values folded left to right in rank order 0, 1, …, p-1. fp32 addition is
// commutative but not associative, so with p ≥ 3 the order is part of the
// result: a ring's rotation c+1, c+2, …, c, recursive doubling's
// (x0+x1)+(x2+x3) or Rabenseifner's halving each round differently on
// values of many magnitudes. With p = 2 every order is rank order up to
// commutation, so the check runs at p = 3 and 4.

// orderSizes are the element counts the rank-order check uses: one small
// enough for every backend's latency-bound algorithm, one large enough for
// its bandwidth-bound one (comm/tcp's ring, MPI's ring or Rabenseifner),
// not divisible by 3 or 4.
func orderSizes() []int { return []int{1000, 1<<17 + 7} }

// orderInputs is every rank's buffer of n values (for p ranks, seeded by
// seed) whose magnitudes span 2⁻²⁰ … 2²⁰ with both signs, so that their fp32
// sums depend on the order of the additions.
func orderInputs(dt tensor.DType, p, n int, seed uint64) []comm.Buf {
	rng := rand.New(rand.NewPCG(seed, uint64(n)))
	bufs := make([]comm.Buf, p)
	for r := range bufs {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32((rng.Float64()*2 - 1) * math.Exp2(float64(rng.IntN(41)-20)))
		}
		if dt == tensor.BF16 {
			h := make([]tensor.BF16Bits, n)
			for i, v := range x {
				h[i] = tensor.ToBF16(v)
			}
			bufs[r] = comm.BF16(h)
		} else {
			bufs[r] = comm.F32(x)
		}
	}
	return bufs
}

// rankOrderFold is the reference: comm.Reduce of bufs in rank order (a new
// buffer; Avg over len(bufs)).
func rankOrderFold(bufs []comm.Buf, op comm.ReduceOp) comm.Buf {
	want := clone(bufs[0])
	comm.Reduce(want, bufs, op, len(bufs))
	return want
}

// CheckRankOrder runs all-reduce and reduce-scatter (out of place and in
// place) on groups, fp32 and bf16, Sum, Avg and Max, at every size of the
// check, and returns an error naming each case where a rank's result
// differs in any bit from rankOrderFold, with the number of elements that
// differ and the largest difference in ulps (every case runs, whatever
// the earlier ones gave). In SPMD mode groups holds
// only this process's group (the others nil): every rank computes all the
// inputs itself.
func CheckRankOrder(groups []comm.Group) error {
	p := len(groups)
	var errs []error
	for _, n := range orderSizes() {
		for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
			for _, op := range []comm.ReduceOp{comm.Sum, comm.Avg, comm.Max} {
				name := fmt.Sprintf("p=%d n=%d %v %v", p, n, dt, op)
				if err := allReduceOrder(groups, dt, op, n); err != nil {
					errs = append(errs, fmt.Errorf("allreduce %s: %w", name, err))
				}
				for _, inPlace := range []bool{false, true} {
					if err := reduceScatterOrder(groups, dt, op, n/p, inPlace); err != nil {
						errs = append(errs, fmt.Errorf("reducescatter %s in-place=%v: %w", name, inPlace, err))
					}
				}
			}
		}
	}
	return errors.Join(errs...)
}

// rankOrder is the conformance case: CheckRankOrder on a world of p ranks.
func rankOrder(p int) func(e *env) error {
	return func(e *env) error {
		return CheckRankOrder(e.world(p, normalTimeout).Groups)
	}
}

func allReduceOrder(gs []comm.Group, dt tensor.DType, op comm.ReduceOp, n int) error {
	bufs := orderInputs(dt, len(gs), n, 1)
	want := rankOrderFold(bufs, op)
	return Parallel(gs, time.Minute, func(r int, g comm.Group) error {
		if err := comm.AllReduce(g, bufs[r], op); err != nil {
			return err
		}
		return orderDiff(bufs[r], want)
	})
}

func reduceScatterOrder(gs []comm.Group, dt tensor.DType, op comm.ReduceOp, m int, inPlace bool) error {
	p := len(gs)
	srcs := orderInputs(dt, p, p*m, 2)
	want := rankOrderFold(srcs, op)
	return Parallel(gs, time.Minute, func(r int, g comm.Group) error {
		dst := newBuf(dt, m)
		if inPlace {
			dst = srcs[r].Slice(r*m, (r+1)*m)
		}
		if err := comm.ReduceScatter(g, dst, srcs[r], op); err != nil {
			return err
		}
		if err := orderDiff(dst, want.Slice(r*m, (r+1)*m)); err != nil {
			return fmt.Errorf("chunk %d: %w", r, err)
		}
		return nil
	})
}

// orderDiff is nil when got and want (one length and dtype) agree in every
// bit, else an error with how many elements differ, the first, and the
// largest difference in ulps of the dtype.
func orderDiff(got, want comm.Buf) error {
	count, first, most := 0, -1, int64(0)
	for i := 0; i < want.Len(); i++ {
		if bits(got, i) == bits(want, i) {
			continue
		}
		count++
		if first < 0 {
			first = i
		}
		most = max(most, ulps(got, want, i))
	}
	if count == 0 {
		return nil
	}
	return fmt.Errorf("%d of %d elements differ from the rank-order fold (max %d ulps); first: element %d = %g, want %g",
		count, want.Len(), most, first, at(got, first), at(want, first))
}

// ulps is how many representable values of the dtype lie between element i
// of a and of b (on a monotone integer line through ±0).
func ulps(a, b comm.Buf, i int) int64 {
	line := func(u uint32, sign uint32) int64 {
		if u&sign != 0 {
			return -int64(u &^ sign)
		}
		return int64(u)
	}
	sign := uint32(1 << 31)
	if a.DType() == tensor.BF16 {
		sign = 1 << 15
	}
	d := line(bits(a, i), sign) - line(bits(b, i), sign)
	if d < 0 {
		d = -d
	}
	return d
}
