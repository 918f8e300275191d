package tcp

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"sync"

	"trellis/comm"
)

// Tags: a collective uses collTag | sequence<<subBits | sub, where sequence
// counts the group's collectives (equal on every member, because all issue
// the same ones in the same order) and sub numbers the operation's
// sub-channels (ring steps). Send/recv use the caller's tag, which must be
// below comm.MaxTag.
const (
	collTag = uint64(1) << 63
	subBits = 24
	seqMask = 1<<(63-subBits) - 1
)

// group is a comm.Group over a list of world ranks.
type group struct {
	w     *world
	id    uint64
	name  string
	ranks []int // world rank of each group rank
	me    int
	q     *comm.Queue

	seq     uint64 // collectives issued; touched only by the queue goroutine
	scratch []byte // touched only by the queue goroutine

	mu     sync.Mutex
	closed bool

	p2pMu sync.Mutex // held while one Send or Recv queues its pieces
}

// validGroupID reports whether a group could have id: the world's 0, the
// rendezvous barrier's, or an odd subgroup id (NewGroup).
func validGroupID(id uint64) bool { return id == 0 || id == rendezvousGroup || id&1 == 1 }

func (w *world) newGroup(id uint64, name string, ranks []int) *group {
	g := &group{w: w, id: id, name: name, ranks: ranks, q: comm.NewQueue()}
	for i, r := range ranks {
		if r == w.rank {
			g.me = i
		}
	}
	w.mu.Lock()
	w.groups[id] = g
	err := w.err
	w.mu.Unlock()
	if err != nil {
		g.q.Fail(err)
	}
	return g
}

func (g *group) Rank() int          { return g.me }
func (g *group) Size() int          { return len(g.ranks) }
func (g *group) GlobalRanks() []int { return append([]int(nil), g.ranks...) }

// Stats is the queue's accounting and the bytes of frames for this group
// buffered before their receives were posted.
func (g *group) Stats() comm.Stats {
	s := g.q.Stats()
	s.Buffered = g.w.self.heldFor(g.id)
	for _, p := range g.w.peers {
		if p != nil {
			s.Buffered += p.box.heldFor(g.id)
		}
	}
	return s
}

// NewGroup derives a subgroup. Its id hashes the parent's id, the name and
// the world ranks, so every member computes the same id without talking.
func (g *group) NewGroup(name string, ranks []int) (comm.Group, error) {
	if _, err := comm.CheckNewGroup(name, ranks, g.me, len(g.ranks)); err != nil {
		return nil, fmt.Errorf("tcp: %w", err)
	}
	world := make([]int, len(ranks))
	for i, r := range ranks {
		world[i] = g.ranks[r]
	}
	h := fnv.New64a()
	h.Write([]byte(strconv.FormatUint(g.id, 16) + "/" + name + "/" + fmt.Sprint(world)))
	id := h.Sum64() | 1 // never 0, the world's id
	g.w.mu.Lock()
	_, dup := g.w.groups[id]
	closing := g.w.closing
	g.w.mu.Unlock()
	switch {
	case closing:
		return nil, comm.ErrClosed
	case dup:
		return nil, fmt.Errorf("%w: tcp: NewGroup %q over %v already exists", comm.ErrArgs, name, world)
	}
	return g.w.newGroup(id, name, world), nil
}

// Close closes the group; closing the world group closes the world.
func (g *group) Close() error {
	if g.id == 0 {
		g.w.close(true)
		return nil
	}
	g.shutdown()
	return nil
}

// Abort breaks the world with err as if this rank had found it: a group
// built on this one (comm/hier) calls it when another transport failed,
// so that the ranks of other hosts waiting on this one learn which rank
// failed (the abort frames name it) instead of seeing this rank close in
// good order. A *comm.PeerError in err names a world rank and keeps it;
// any other error names this rank. A group closed here (comm.ErrClosed)
// is no failure: the world's Close says goodbye.
func (g *group) Abort(err error) {
	if err == nil || errors.Is(err, comm.ErrClosed) {
		return
	}
	pe := &comm.PeerError{Rank: g.w.rank, Op: "abort", Err: err}
	var named *comm.PeerError
	if errors.As(err, &named) && named.Rank >= 0 && named.Rank < g.w.size {
		pe = &comm.PeerError{Rank: named.Rank, Op: named.Op, Err: named.Err}
	}
	g.w.fail(pe)
	g.w.awaitAborts()
}

// shutdown cancels the group's posted receives and stops its queue.
func (g *group) shutdown() {
	g.mu.Lock()
	already := g.closed
	g.closed = true
	g.mu.Unlock()
	if already {
		return
	}
	g.w.self.cancelGroup(g.id, comm.ErrClosed)
	for _, p := range g.w.peers {
		if p != nil {
			p.box.cancelGroup(g.id, comm.ErrClosed)
		}
	}
	g.q.Close()
	g.w.mu.Lock()
	delete(g.w.groups, g.id)
	g.w.mu.Unlock()
}

// submit queues an operation; fn runs on the queue with a fresh op.
func (g *group) submit(name string, b comm.Buf, coll bool, fn func(o *op) error) comm.Work {
	return g.q.Submit(b.Bytes(), func() error {
		o := g.newOp(name, coll, b.DType())
		return o.end(fn(o))
	})
}

// buf returns n bytes of the group's scratch space.
func (g *group) buf(n int) []byte {
	if cap(g.scratch) < n {
		g.scratch = alignedBytes(n)
	}
	return g.scratch[:n]
}

// fail returns a finished Work for an argument error (issued nowhere, so
// the group stays usable).
func fail(errs ...error) (comm.Work, bool) {
	if err := errors.Join(errs...); err != nil {
		return comm.Done(fmt.Errorf("tcp: %w", err)), true
	}
	return nil, false
}

func (g *group) AllReduce(b comm.Buf, rop comm.ReduceOp) comm.Work {
	if w, bad := fail(comm.CheckAllReduce(b, rop)); bad {
		return w
	}
	return g.submit("allreduce", b, true, func(o *op) error { return o.allReduce(b, rop) })
}

func (g *group) ReduceScatter(dst, src comm.Buf, rop comm.ReduceOp) comm.Work {
	if w, bad := fail(comm.CheckReduceScatter(dst, src, rop, g.me, len(g.ranks))); bad {
		return w
	}
	return g.submit("reducescatter", src, true, func(o *op) error { return o.reduceScatter(dst, src, rop) })
}

func (g *group) AllGather(dst, src comm.Buf) comm.Work {
	if w, bad := fail(comm.CheckAllGather(dst, src, g.me, len(g.ranks))); bad {
		return w
	}
	return g.submit("allgather", dst, true, func(o *op) error { return o.allGather(dst, src) })
}

func (g *group) Broadcast(b comm.Buf, root int) comm.Work {
	if w, bad := fail(comm.CheckBroadcast(b, root, len(g.ranks))); bad {
		return w
	}
	return g.submit("broadcast", b, true, func(o *op) error { return o.broadcast(b, root) })
}

func (g *group) AllToAll(dst, src comm.Buf) comm.Work {
	if w, bad := fail(comm.CheckAllToAll(dst, src, len(g.ranks))); bad {
		return w
	}
	return g.submit("alltoall", src, true, func(o *op) error { return o.allToAll(dst, src) })
}

func (g *group) Barrier() comm.Work {
	return g.submit("barrier", comm.Buf{}, true, func(o *op) error { return o.barrier() })
}

// Send and Recv run outside the queue (see comm): the frames are queued to
// the connection, or the receives posted to the mailbox, when the operation
// is issued, under p2pMu so that concurrent issuers never interleave the
// pieces of two messages; a goroutine then waits for them, up to
// OpTimeout, and finishes the Work.
func (g *group) Send(b comm.Buf, peer, tag int) comm.Work {
	return g.p2p("send", b, peer, tag, func(o *op) {
		o.sendMsg(peer, bytesOf(b), b.DType().Size(), 0)
	})
}

func (g *group) Recv(b comm.Buf, peer, tag int) comm.Work {
	return g.p2p("recv", b, peer, tag, func(o *op) {
		o.recvMsg(peer, bytesOf(b), b.DType().Size(), nil, 0)
	})
}

func (g *group) p2p(name string, b comm.Buf, peer, tag int, issue func(o *op)) comm.Work {
	if w, bad := fail(comm.CheckP2P(name, peer, tag, len(g.ranks))); bad {
		return w
	}
	w, finish, err := g.q.Start(b.Bytes())
	if err != nil {
		return comm.Done(err)
	}
	o := g.newOp(name, false, b.DType())
	o.tag = uint64(tag)
	g.p2pMu.Lock()
	issue(o)
	g.p2pMu.Unlock()
	go func() { finish(o.end(nil)) }()
	return w
}
