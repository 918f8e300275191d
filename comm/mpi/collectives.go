//go:build mpi

package mpi

// #include "tmpi.h"
import "C"

import (
	"runtime"
	"unsafe"

	"trellis/comm"
	"trellis/tensor"
)

// run submits a collective to the queue: start issues the MPI call into
// req; the queue then waits for it (call) and runs after.
func (g *group) run(op string, bytes int, pin *runtime.Pinner, start func(req *request) C.int, after func()) comm.Work {
	return g.q.Submit(bytes, func() error {
		if err := g.call(op, pin, start); err != nil {
			return err
		}
		if after != nil {
			after()
		}
		return nil
	})
}

// call, on the queue, issues one non-blocking MPI call (start, into req)
// and waits for it until done or the deadline (wait); pin is the Go memory
// the call uses. A collective of several phases (the rank-order
// reductions) makes one call per phase, each with its own deadline.
func (g *group) call(op string, pin *runtime.Pinner, start func(req *request) C.int) error {
	req := new(request)
	if err := mpiErr(op, start(req)); err != nil {
		pin.Unpin()
		return err
	}
	if err := g.wait(req, op, pin); err != nil {
		return err
	}
	// A failure of point-to-point on this group (ErrBufferFull) that
	// happened while the collective was in flight breaks it too: take in
	// what has arrived and report the group's state.
	g.p2p.drain(g)
	return g.q.Err()
}

// f32 is the fp32 view of n floats at p.
func f32(p unsafe.Pointer, n int) []float32 { return unsafe.Slice((*float32)(p), n) }

// staged is fp32 C memory holding a bf16 payload widened (MPI has no bf16).
// It is freed once the reduction is done, or leaked with a failed request.
func staged(b comm.Buf) (unsafe.Pointer, []float32) {
	n := b.Len()
	p := C.malloc(C.size_t(4*n + 4))
	s := f32(p, n)
	for i, v := range b.BFloat16s() {
		s[i] = v.Float32()
	}
	return p, s
}

// narrow rounds s·scale into dst once.
func narrow(dst []tensor.BF16Bits, s []float32, scale float32) {
	for i, v := range s {
		dst[i] = tensor.ToBF16(v * scale)
	}
}

// scale multiplies s by k (Avg's fl(1/p)) unless k is 1.
func scale(s []float32, k float32) {
	if k == 1 {
		return
	}
	for i := range s {
		s[i] *= k
	}
}

func (g *group) avg(op comm.ReduceOp) float32 {
	if op == comm.Avg {
		return comm.AvgScale(g.size)
	}
	return 1
}

func isMax(op comm.ReduceOp) C.int {
	if op == comm.Max {
		return 1
	}
	return 0
}

func (g *group) AllReduce(buf comm.Buf, op comm.ReduceOp) comm.Work {
	if err := comm.CheckAllReduce(buf, op); err != nil {
		return comm.Done(err)
	}
	if err := checkCount("allreduce", 4*buf.Len()); err != nil {
		return comm.Done(err)
	}
	if rankOrder(g.size) {
		return g.orderedAllReduce(buf, op)
	}
	n, k := buf.Len(), g.avg(op)
	if buf.DType() == tensor.F32 {
		b := bytesOf(buf)
		return g.run("MPI_Iallreduce", buf.Bytes(), pinned(b), func(req *request) C.int {
			return C.t_iallreduce((*C.float)(ptr(b)), C.int(n), isMax(op), g.c, req)
		}, func() { scale(buf.Float32s(), k) })
	}
	var p unsafe.Pointer
	var s []float32
	return g.run("MPI_Iallreduce", buf.Bytes(), pinned(), func(req *request) C.int {
		p, s = staged(buf)
		return C.t_iallreduce((*C.float)(p), C.int(n), isMax(op), g.c, req)
	}, func() { narrow(buf.BFloat16s(), s, k); C.free(p) })
}

func (g *group) ReduceScatter(dst, src comm.Buf, op comm.ReduceOp) comm.Work {
	if err := comm.CheckReduceScatter(dst, src, op, g.rank, g.size); err != nil {
		return comm.Done(err)
	}
	if err := checkCount("reducescatter", 4*src.Len()); err != nil {
		return comm.Done(err)
	}
	if rankOrder(g.size) {
		return g.orderedReduceScatter(dst, src, op)
	}
	n, k := dst.Len(), g.avg(op)
	if src.DType() == tensor.F32 {
		// MPI forbids dst inside src: reduce into a fresh buffer when
		// dst is this rank's chunk of src (in place).
		out := make([]float32, n)
		sb, ob := bytesOf(src), bytesOf(comm.F32(out))
		return g.run("MPI_Ireduce_scatter_block", src.Bytes(), pinned(sb, ob), func(req *request) C.int {
			return C.t_ireduce_scatter((*C.float)(ptr(sb)), (*C.float)(ptr(ob)), C.int(n), isMax(op), g.c, req)
		}, func() { scale(out, k); copy(dst.Float32s(), out) })
	}
	var ps, pd unsafe.Pointer
	var sd []float32
	return g.run("MPI_Ireduce_scatter_block", src.Bytes(), pinned(), func(req *request) C.int {
		ps, _ = staged(src)
		pd = C.malloc(C.size_t(4*n + 4))
		sd = f32(pd, n)
		return C.t_ireduce_scatter((*C.float)(ps), (*C.float)(pd), C.int(n), isMax(op), g.c, req)
	}, func() { narrow(dst.BFloat16s(), sd, k); C.free(ps); C.free(pd) })
}

func (g *group) AllGather(dst, src comm.Buf) comm.Work {
	if err := comm.CheckAllGather(dst, src, g.rank, g.size); err != nil {
		return comm.Done(err)
	}
	if err := checkCount("allgather", dst.Bytes()); err != nil {
		return comm.Done(err)
	}
	db, sb := bytesOf(dst), bytesOf(src)
	n := src.Bytes()
	inPlace := n > 0 && &sb[0] == &db[g.rank*n]
	return g.run("MPI_Iallgather", dst.Bytes(), pinned(db, sb), func(req *request) C.int {
		s := ptr(sb)
		if inPlace {
			s = nil
		}
		return C.t_iallgather(s, ptr(db), C.int(n), g.c, req)
	}, nil)
}

func (g *group) Broadcast(buf comm.Buf, root int) comm.Work {
	if err := comm.CheckBroadcast(buf, root, g.size); err != nil {
		return comm.Done(err)
	}
	if err := checkCount("broadcast", buf.Bytes()); err != nil {
		return comm.Done(err)
	}
	b := bytesOf(buf)
	return g.run("MPI_Ibcast", buf.Bytes(), pinned(b), func(req *request) C.int {
		return C.t_ibcast(ptr(b), C.int(len(b)), C.int(root), g.c, req)
	}, nil)
}

func (g *group) AllToAll(dst, src comm.Buf) comm.Work {
	if err := comm.CheckAllToAll(dst, src, g.size); err != nil {
		return comm.Done(err)
	}
	if err := checkCount("alltoall", dst.Bytes()); err != nil {
		return comm.Done(err)
	}
	db, sb := bytesOf(dst), bytesOf(src)
	return g.run("MPI_Ialltoall", dst.Bytes(), pinned(db, sb), func(req *request) C.int {
		return C.t_ialltoall(ptr(sb), ptr(db), C.int(len(sb)/g.size), g.c, req)
	}, nil)
}

func (g *group) Barrier() comm.Work {
	return g.run("MPI_Ibarrier", 0, pinned(), func(req *request) C.int { return C.t_ibarrier(g.c, req) }, nil)
}
