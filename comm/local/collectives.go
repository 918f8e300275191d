package local

import (
	"time"

	"trellis/comm"
	"trellis/tensor"
)

// smallBroadcast is the payload below which Broadcast copies from the root
// in one phase instead of scatter + all-gather.
const smallBroadcast = 32 << 10

// chunk returns the bounds of chunk r of n elements split p ways, aligned
// down to 16 elements (64 bytes of fp32) so ranks write separate cache lines.
func chunk(n, p, r int) (lo, hi int) {
	lo = (r * n / p) &^ 15
	if r == p-1 {
		return lo, n
	}
	return lo, ((r + 1) * n / p) &^ 15
}

// copyBuf copies src into dst (same dtype and length).
func copyBuf(dst, src comm.Buf) {
	if dst.DType() == tensor.BF16 {
		copy(dst.BFloat16s(), src.BFloat16s())
		return
	}
	copy(dst.Float32s(), src.Float32s())
}

// begin publishes this member's arguments, waits for every member, and
// checks that they all issued the same operation. It tells the queue when
// the last member arrived: when the last caller issued the operation (the
// caller's wait before then, Stats.Skew, is waiting for peers still
// computing; what follows — the members' queues reaching the operation,
// the hand-offs to their goroutines, the barrier — is the collective's).
func (g *group) begin(a args) error {
	a.issued = g.q.Issued()
	if err := g.t.arrive(g.rank, &a, g.w.cfg.Timeout, a.op); err != nil {
		return err
	}
	last := a.issued
	for q := range g.t.ranks {
		if is := g.peerArgs(q).issued; is.After(last) {
			last = is
		}
	}
	g.q.Arrived(last)
	g.posted = last
	return g.t.check(g.rank)
}

// barrier is the barrier between phases of operation op.
func (g *group) sync(op string) error {
	return g.t.arrive(g.rank, nil, g.w.cfg.Timeout, op)
}

// peerArgs returns member q's arguments of the current operation.
func (g *group) peerArgs(q int) args { return g.t.args[q] }

// allReduce: member r owns chunk r of every member's buffer. It folds that
// chunk of all the buffers, block by block in rank order, and writes the
// result back into all of them (comm.ReduceTo), so each element of each
// buffer is read once and written once, by its owner only.
func (g *group) allReduce(buf comm.Buf, op comm.ReduceOp) error {
	const name = "allreduce"
	if err := g.begin(args{op: name, redop: op, a: buf, length: buf.Len()}); err != nil {
		return err
	}
	p, me, n := g.Size(), g.rank, buf.Len()
	es := int64(buf.DType().Size())
	lo, hi := chunk(n, p, me)
	start := time.Now()
	if p > 1 {
		bufs := make([]comm.Buf, p)
		for q := range bufs {
			bufs[q] = g.peerArgs(q).a.Slice(lo, hi)
		}
		comm.ReduceTo(bufs, bufs, op, p)
	}
	g.emulate(start, func(q int) (int64, int64, bool) {
		// This member reads and writes chunk me of q's buffer; q reads
		// and writes chunk q of this member's.
		qlo, qhi := chunk(n, p, q)
		b := int64(hi-lo+qhi-qlo) * es
		return b, b, true
	})
	return g.sync(name)
}

// gatherChunks copies chunk q of member q's buffer a into buf, for every q
// other than this member and skip.
func (g *group) gatherChunks(buf comm.Buf, n, skip int) {
	p := g.Size()
	for q := 0; q < p; q++ {
		if q == g.rank || q == skip {
			continue
		}
		qlo, qhi := chunk(n, p, q)
		copyBuf(buf.Slice(qlo, qhi), g.peerArgs(q).a.Slice(qlo, qhi))
	}
}

func (g *group) reduceScatter(dst, src comm.Buf, op comm.ReduceOp) error {
	const name = "reducescatter"
	if err := g.begin(args{op: name, redop: op, a: src, b: dst, length: dst.Len()}); err != nil {
		return err
	}
	p, me, n := g.Size(), g.rank, dst.Len()
	start := time.Now()
	srcs := make([]comm.Buf, p)
	for q := range srcs {
		srcs[q] = g.peerArgs(q).a.Slice(me*n, (me+1)*n)
	}
	comm.Reduce(dst, srcs, op, p)
	bytes := int64(dst.Bytes())
	g.emulate(start, func(int) (int64, int64, bool) { return bytes, bytes, true })
	return g.sync(name)
}

func (g *group) allGather(dst, src comm.Buf) error {
	const name = "allgather"
	if err := g.begin(args{op: name, a: dst, b: src, length: src.Len()}); err != nil {
		return err
	}
	p, n := g.Size(), src.Len()
	start := time.Now()
	for q := 0; q < p; q++ {
		part := dst.Slice(q*n, (q+1)*n)
		if from := g.peerArgs(q).b; q != g.rank || !sameBuf(part, from) {
			copyBuf(part, from)
		}
	}
	bytes := int64(src.Bytes())
	g.emulate(start, func(int) (int64, int64, bool) { return bytes, bytes, true })
	return g.sync(name)
}

// sameBuf reports whether a and b are the same elements (an in-place chunk).
func sameBuf(a, b comm.Buf) bool {
	if a.Len() != b.Len() || a.Len() == 0 {
		return a.Len() == b.Len()
	}
	if a.DType() == tensor.BF16 {
		return &a.BFloat16s()[0] == &b.BFloat16s()[0]
	}
	return &a.Float32s()[0] == &b.Float32s()[0]
}

func (g *group) broadcast(buf comm.Buf, root int) error {
	const name = "broadcast"
	if err := g.begin(args{op: name, root: root, a: buf, length: buf.Len()}); err != nil {
		return err
	}
	p, me, n := g.Size(), g.rank, buf.Len()
	es := int64(buf.DType().Size())
	start := time.Now()
	if buf.Bytes() < smallBroadcast || p <= 2 {
		if me != root {
			copyBuf(buf, g.peerArgs(root).a)
		}
		bytes := int64(buf.Bytes())
		g.emulate(start, func(q int) (int64, int64, bool) {
			switch {
			case me == root:
				return bytes, 0, true
			case q == root:
				return 0, bytes, true
			}
			return 0, 0, false
		})
		return g.sync(name)
	}
	// Scatter: member r takes chunk r from the root.
	lo, hi := chunk(n, p, me)
	if me != root {
		copyBuf(buf.Slice(lo, hi), g.peerArgs(root).a.Slice(lo, hi))
	}
	g.emulate(start, func(q int) (int64, int64, bool) {
		qlo, qhi := chunk(n, p, q)
		switch {
		case me == root:
			return int64(qhi-qlo) * es, 0, true
		case q == root:
			return 0, int64(hi-lo) * es, true
		}
		return 0, 0, false
	})
	if err := g.sync(name); err != nil {
		return err
	}
	// All-gather among the members; the root already has everything.
	start = time.Now()
	if me != root {
		g.gatherChunks(buf, n, -1)
	}
	g.emulate(start, func(q int) (int64, int64, bool) {
		// Every non-root member reads chunk q from member q (the root
		// included); the root reads nothing.
		var send, recv int64
		if q != root {
			send = int64(hi-lo) * es
		}
		if me != root {
			qlo, qhi := chunk(n, p, q)
			recv = int64(qhi-qlo) * es
		}
		return send, recv, true
	})
	return g.sync(name)
}

func (g *group) allToAll(dst, src comm.Buf) error {
	const name = "alltoall"
	if err := g.begin(args{op: name, a: dst, b: src, length: src.Len()}); err != nil {
		return err
	}
	p, me := g.Size(), g.rank
	n := src.Len() / p
	start := time.Now()
	for q := 0; q < p; q++ {
		copyBuf(dst.Slice(q*n, (q+1)*n), g.peerArgs(q).b.Slice(me*n, (me+1)*n))
	}
	bytes := int64(n) * int64(src.DType().Size())
	g.emulate(start, func(int) (int64, int64, bool) { return bytes, bytes, true })
	return g.sync(name)
}

// barrier has a second barrier so that no member publishes its next
// operation's arguments while a peer still checks this one's.
func (g *group) barrier() error {
	const name = "barrier"
	if err := g.begin(args{op: name}); err != nil {
		return err
	}
	g.emulate(time.Now(), func(int) (int64, int64, bool) { return 0, 0, true })
	return g.sync(name)
}
