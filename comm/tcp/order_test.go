package tcp

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"trellis/comm"
	"trellis/comm/commtest"
	"trellis/tensor"
)

// TestReductionsFoldInRankOrder: every all-reduce and reduce-scatter, small
// (direct) or large (beyond directBytes), gives bit for bit what comm/local
// gives: comm.Reduce of the ranks' buffers in rank order 0, 1, …, p-1. The
// values span many magnitudes, so any other order (a ring's rotation c+1,
// c+2, …, c) rounds differently; p = 3 and 4 (with p = 2 every order is
// rank order up to commutation).
func TestReductionsFoldInRankOrder(t *testing.T) {
	for _, p := range []int{3, 4} {
		gs := startWorld(t, p, DefaultTimeout, nil)
		for _, n := range []int{1000, 1<<17 + 7} { // direct; ring-sized
			for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
				for _, op := range []comm.ReduceOp{comm.Sum, comm.Avg} {
					name := fmt.Sprintf("p=%d/n=%d/%v/%v", p, n, dt, op)
					t.Run(name+"/allreduce", func(t *testing.T) { checkAllReduceOrder(t, gs, dt, op, n) })
					for _, inPlace := range []bool{false, true} {
						t.Run(fmt.Sprintf("%s/reducescatter/inplace=%v", name, inPlace), func(t *testing.T) {
							checkReduceScatterOrder(t, gs, dt, op, n/p, inPlace)
						})
					}
				}
			}
		}
	}
}

// orderInputs is every rank's buffer of n values whose magnitudes span
// 2^-20 … 2^20 with both signs, so that fp32 sums depend on their order.
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

func cloneBuf(b comm.Buf) comm.Buf {
	if b.DType() == tensor.BF16 {
		return comm.BF16(append([]tensor.BF16Bits(nil), b.BFloat16s()...))
	}
	return comm.F32(append([]float32(nil), b.Float32s()...))
}

// sameBufBits is the first index where a and b differ in their bits, or -1.
func sameBufBits(a, b comm.Buf) int {
	if a.DType() == tensor.BF16 {
		x, y := a.BFloat16s(), b.BFloat16s()
		for i := range x {
			if x[i] != y[i] {
				return i
			}
		}
		return -1
	}
	x, y := a.Float32s(), b.Float32s()
	for i := range x {
		if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
			return i
		}
	}
	return -1
}

func checkAllReduceOrder(t *testing.T, gs []comm.Group, dt tensor.DType, op comm.ReduceOp, n int) {
	p := len(gs)
	bufs := orderInputs(dt, p, n, 1)
	want := cloneBuf(bufs[0])
	comm.Reduce(want, bufs, op, p)
	err := commtest.Parallel(gs, time.Minute, func(r int, g comm.Group) error {
		if err := comm.AllReduce(g, bufs[r], op); err != nil {
			return err
		}
		if i := sameBufBits(bufs[r], want); i >= 0 {
			return fmt.Errorf("element %d of %d differs from the rank-order fold", i, n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func checkReduceScatterOrder(t *testing.T, gs []comm.Group, dt tensor.DType, op comm.ReduceOp, m int, inPlace bool) {
	p := len(gs)
	srcs := orderInputs(dt, p, p*m, 2)
	want := cloneBuf(srcs[0])
	comm.Reduce(want, srcs, op, p)
	err := commtest.Parallel(gs, time.Minute, func(r int, g comm.Group) error {
		dst := cloneBuf(srcs[r].Slice(0, m))
		if inPlace {
			dst = srcs[r].Slice(r*m, (r+1)*m)
		}
		if err := comm.ReduceScatter(g, dst, srcs[r], op); err != nil {
			return err
		}
		if i := sameBufBits(dst, want.Slice(r*m, (r+1)*m)); i >= 0 {
			return fmt.Errorf("element %d of chunk %d differs from the rank-order fold", i, r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
