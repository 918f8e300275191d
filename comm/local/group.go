package local

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"trellis/comm"
)

// group is one member's handle on a team; it owns the member's ordered queue.
type group struct {
	w    *world
	t    *team
	rank int // member index in t.ranks
	q    *comm.Queue

	mu       sync.Mutex
	closed   bool
	children []*group          // groups made from this one, closed with it
	linkFree map[int]time.Time // link emulation: when the link to each peer is free (arrival)

	// Collectives' link emulation, touched only by the goroutine running
	// the member's queue: when the group's last member posted the
	// operation under way (zero once its first phase has been emulated),
	// and when this member's collective link is next free.
	posted, wire time.Time
}

var _ comm.Group = (*group)(nil)

func newGroup(w *world, t *team, rank int) *group {
	q := comm.NewQueue()
	q.SetCrowding(w.crowd)
	q.SetPoll(w.cfg.Poll)
	return &group{w: w, t: t, rank: rank, q: q, linkFree: map[int]time.Time{}}
}

func (g *group) Rank() int { return g.rank }
func (g *group) Size() int { return len(g.t.ranks) }

func (g *group) GlobalRanks() []int { return append([]int(nil), g.t.ranks...) }

// Stats is the queue's accounting and the bytes of messages waiting in this
// member's mailbox.
func (g *group) Stats() comm.Stats {
	s := g.q.Stats()
	g.t.mu.Lock()
	s.Buffered = g.t.held[g.rank]
	g.t.mu.Unlock()
	return s
}

// submit queues fn; an operation of a group this rank has closed reports
// ErrClosed rather than the error its own closing caused.
func (g *group) submit(bytes int, fn func() error) comm.Work {
	return g.q.Submit(bytes, func() error {
		err := fn()
		g.t.finish(g.rank, err != nil)
		if err != nil && g.isClosed() {
			return comm.ErrClosed
		}
		return err
	})
}

func (g *group) isClosed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

func (g *group) AllReduce(buf comm.Buf, op comm.ReduceOp) comm.Work {
	if err := comm.CheckAllReduce(buf, op); err != nil {
		return comm.Done(err)
	}
	return g.submit(buf.Bytes(), func() error { return g.allReduce(buf, op) })
}

func (g *group) ReduceScatter(dst, src comm.Buf, op comm.ReduceOp) comm.Work {
	if err := comm.CheckReduceScatter(dst, src, op, g.rank, g.Size()); err != nil {
		return comm.Done(err)
	}
	return g.submit(src.Bytes(), func() error { return g.reduceScatter(dst, src, op) })
}

func (g *group) AllGather(dst, src comm.Buf) comm.Work {
	if err := comm.CheckAllGather(dst, src, g.rank, g.Size()); err != nil {
		return comm.Done(err)
	}
	return g.submit(dst.Bytes(), func() error { return g.allGather(dst, src) })
}

func (g *group) Broadcast(buf comm.Buf, root int) comm.Work {
	if err := comm.CheckBroadcast(buf, root, g.Size()); err != nil {
		return comm.Done(err)
	}
	return g.submit(buf.Bytes(), func() error { return g.broadcast(buf, root) })
}

func (g *group) AllToAll(dst, src comm.Buf) comm.Work {
	if err := comm.CheckAllToAll(dst, src, g.Size()); err != nil {
		return comm.Done(err)
	}
	return g.submit(src.Bytes(), func() error { return g.allToAll(dst, src) })
}

func (g *group) Barrier() comm.Work {
	return g.submit(0, g.barrier)
}

// NewGroup makes the subgroup of the listed members. Its identity is this
// group's, the name and the list, and how many such groups this rank made
// before, so every member that calls it with the same name and list gets
// the same group without communicating.
func (g *group) NewGroup(name string, ranks []int) (comm.Group, error) {
	me, err := comm.CheckNewGroup(name, ranks, g.rank, g.Size())
	if err != nil {
		return nil, err
	}
	members := make([]int, len(ranks))
	for i, r := range ranks {
		members[i] = g.t.ranks[r]
	}
	key := fmt.Sprintf("%s/%q%v", g.t.key, name, ranks)
	child := newGroup(g.w, g.w.join(key, members, members[me]), me)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		child.q.Close()
		g.w.leave(child.t)
		return nil, fmt.Errorf("local: newgroup %q: %w", name, comm.ErrClosed)
	}
	g.children = append(g.children, child)
	return child, nil
}

// Close closes the groups made from this one, then breaks this group for its
// peers with a *comm.PeerError naming this rank, and stops its queue: pending
// operations fail with ErrClosed. Closing twice is harmless.
func (g *group) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	kids := g.children
	g.children = nil
	g.mu.Unlock()
	var errs []error
	for _, k := range kids {
		errs = append(errs, k.Close())
	}
	g.t.fail(&comm.PeerError{Rank: g.t.ranks[g.rank], Op: "close", Err: comm.ErrClosed})
	g.q.Close()
	g.w.leave(g.t)
	return errors.Join(errs...)
}
