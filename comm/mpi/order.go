//go:build mpi

package mpi

// #include "tmpi.h"
import "C"

import (
	"unsafe"

	"trellis/comm"
	"trellis/tensor"
)

// Reductions in rank order. comm/local and comm/tcp reduce every element as
// comm.Reduce of the p ranks' values folded left to right in rank order
// 0, 1, …, p-1; fp32 addition is not associative, so the order is part of
// the result. MPI_SUM leaves the association to the library (a binomial
// tree's (x0+x1)+(x2+x3), a ring's rotation, Rabenseifner's halving), so
// with p ≥ 3 the reductions do not use it: rank r receives chunk r of every
// other rank's buffer with one MPI_Ialltoallv and folds the p chunks itself
// with comm.Reduce, in rank order (reduce-scatter); all-reduce then shares
// the reduced chunks with an in-place MPI_Iallgatherv. Each rank sends and
// receives (p-1)/p of the buffer per phase, a ring's traffic. With p ≤ 2
// every order is rank order up to commutation (x⊕y = y⊕x), and MPI's own
// reduction runs (collectives.go).
//
// The chunks of an all-reduce of n elements are bounds[j] = ⌊j·n/p⌋, so n
// need not divide by p; bf16 chunks travel as bf16 (half the bytes of the
// fp32 staging MPI_SUM needs) and comm.Reduce widens, sums in fp32, scales
// by comm.AvgScale(p) for Avg and rounds once. Max folds the same way, so
// that NaN propagates as in comm.Reduce.

// rankOrder reports whether a group of p ranks reduces in rank order itself
// rather than with MPI_SUM/MPI_MAX.
func rankOrder(p int) bool { return p > 2 }

// view is the Buf of n elements of dtype dt at C memory q.
func view(dt tensor.DType, q unsafe.Pointer, n int) comm.Buf {
	if dt == tensor.BF16 {
		return comm.BF16(unsafe.Slice((*tensor.BF16Bits)(q), n))
	}
	return comm.F32(f32(q, n))
}

// cInts is C memory for k ints (MPI's counts and displacements, which a
// non-blocking call reads until it completes).
func cInts(k int) (unsafe.Pointer, []C.int) {
	q := C.malloc(C.size_t(k) * C.size_t(unsafe.Sizeof(C.int(0))))
	return q, unsafe.Slice((*C.int)(q), k)
}

// foldScatter, run on the queue, sets dst to chunk r (this rank's) of the
// reduction of every rank's src, folded in rank order:
//
//	dst[i] = s · (src₀[b[r]+i] ⊕ src₁[b[r]+i] ⊕ … ⊕ src_{p-1}[b[r]+i])
//
// (comm.Reduce with avgOver p). Every rank sends chunk j of src to rank j
// and receives chunk r from every other rank into C staging, one
// MPI_Ialltoallv (no self-copy: its own chunk is folded from src). dst may
// be src's chunk r (in place). The staging is freed once folded, or leaked
// with a failed request.
func (g *group) foldScatter(dst, src comm.Buf, bounds []int, op comm.ReduceOp) error {
	p, r := g.size, g.rank
	es := src.DType().Size()
	cr := bounds[r+1] - bounds[r]
	slot := func(i int) int { // where rank i's chunk lands in the staging
		if i > r {
			return i - 1
		}
		return i
	}
	stage := C.malloc(C.size_t((p-1)*cr*es + 1))
	qi, ints := cInts(4 * p)
	sc, sd, rc, rd := ints[:p], ints[p:2*p], ints[2*p:3*p], ints[3*p:]
	for j := 0; j < p; j++ { // (C memory: every entry is written)
		sc[j], rc[j] = 0, 0
		if j != r {
			sc[j] = C.int((bounds[j+1] - bounds[j]) * es)
			rc[j] = C.int(cr * es)
		}
		sd[j] = C.int(bounds[j] * es)
		rd[j] = C.int(slot(j) * cr * es)
	}
	sb := bytesOf(src)
	err := g.call("MPI_Ialltoallv", pinned(sb), func(req *request) C.int {
		return C.t_ialltoallv(ptr(sb), &sc[0], &sd[0], stage, &rc[0], &rd[0], g.c, req)
	})
	if err != nil {
		return err
	}
	srcs := make([]comm.Buf, p)
	for i := range srcs {
		if i == r {
			srcs[i] = src.Slice(bounds[r], bounds[r+1])
		} else {
			srcs[i] = view(src.DType(), unsafe.Add(stage, slot(i)*cr*es), cr)
		}
	}
	comm.Reduce(dst, srcs, op, p)
	C.free(stage)
	C.free(qi)
	return nil
}

// orderedAllReduce is AllReduce in rank order (p ≥ 3): foldScatter into
// this rank's chunk of buf, then an in-place MPI_Iallgatherv of the chunks.
func (g *group) orderedAllReduce(buf comm.Buf, op comm.ReduceOp) comm.Work {
	return g.q.Submit(buf.Bytes(), func() error {
		p, r := g.size, g.rank
		bounds := comm.Partition(buf.Len(), p)
		if err := g.foldScatter(buf.Slice(bounds[r], bounds[r+1]), buf, bounds, op); err != nil {
			return err
		}
		es := buf.DType().Size()
		qi, ints := cInts(2 * p)
		counts, displs := ints[:p], ints[p:]
		for j := 0; j < p; j++ {
			counts[j] = C.int((bounds[j+1] - bounds[j]) * es)
			displs[j] = C.int(bounds[j] * es)
		}
		b := bytesOf(buf)
		err := g.call("MPI_Iallgatherv", pinned(b), func(req *request) C.int {
			return C.t_iallgatherv(ptr(b), &counts[0], &displs[0], g.c, req)
		})
		if err == nil {
			C.free(qi)
		}
		return err
	})
}

// orderedReduceScatter is ReduceScatter in rank order (p ≥ 3): foldScatter
// with chunks of dst.Len() elements.
func (g *group) orderedReduceScatter(dst, src comm.Buf, op comm.ReduceOp) comm.Work {
	return g.q.Submit(src.Bytes(), func() error {
		m := dst.Len()
		bounds := make([]int, g.size+1)
		for j := range bounds {
			bounds[j] = j * m
		}
		return g.foldScatter(dst, src, bounds, op)
	})
}
