package shm

import (
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"sync"

	"trellis/comm"
)

// group is one member's handle on a group's segment.
type group struct {
	w     *world
	seg   *segment
	key   string
	ranks []int // world rank (of this shm world) of each member
	me    int
	q     *comm.Queue
	world bool // the world group: closing it closes the world

	// Collective progress, touched only by the operation running on the
	// queue (one at a time).
	seq    uint64 // collectives begun
	steps  uint64 // steps published (this member's counter)
	slices uint64 // slices begun

	out []outbox // by peer: sends waiting for ring space
	in  inbox

	mu       sync.Mutex
	closed   bool
	children []*group
	failed   error // the break record once read
}

var _ comm.Group = (*group)(nil)

func (w *world) newGroup(key string, seg *segment, ranks []int, me int) *group {
	g := &group{w: w, seg: seg, key: key, ranks: ranks, me: me, q: comm.NewQueue(), world: key == "world",
		out: make([]outbox, len(ranks))}
	g.in.init(len(ranks))
	w.register(g)
	return g
}

func (g *group) Rank() int { return g.me }
func (g *group) Size() int { return len(g.ranks) }

// GlobalRanks maps members to world ranks (Config.WorldRanks).
func (g *group) GlobalRanks() []int {
	out := make([]int, len(g.ranks))
	for i, r := range g.ranks {
		out[i] = g.w.cfg.WorldRanks[r]
	}
	return out
}

// worldRank is member q's world rank, for errors.
func (g *group) worldRank(q int) int { return g.w.cfg.WorldRanks[g.ranks[q]] }

func (g *group) l() layout { return g.seg.l }

// Stats is the queue's accounting and the bytes held for receives not yet
// posted (after moving whatever has arrived into the mailbox).
func (g *group) Stats() comm.Stats {
	g.in.poll(g)
	s := g.q.Stats()
	s.Buffered = g.in.heldBytes()
	return s
}

// NewGroup maps the subgroup's segment, creating it if this member is the
// first to get there; it needs no communication. The segment is named
// after the world's nonce, this group's key, the name, the members and how
// many such groups this rank made before, so every member finds the same
// one, and a group made again after Close gets a new one.
func (g *group) NewGroup(name string, ranks []int) (comm.Group, error) {
	me, err := comm.CheckNewGroup(name, ranks, g.me, g.Size())
	if err != nil {
		return nil, fmt.Errorf("shm: %w", err)
	}
	members := make([]int, len(ranks))
	for i, r := range ranks {
		members[i] = g.ranks[r]
	}
	key := fmt.Sprintf("%s/%q%v", g.key, name, members)
	w := g.w
	w.mu.Lock()
	inst := w.made[key]
	w.made[key]++
	w.mu.Unlock()
	h := fnv.New64a()
	fmt.Fprintf(h, "%s#%d", key, inst)
	file := fmt.Sprintf("%s-%016x-%016x", w.cfg.Name, w.seg.nonce(), h.Sum64())
	g.mu.Lock()
	closed := g.closed
	g.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("shm: newgroup %q: %w", name, comm.ErrClosed)
	}
	seg, err := w.attach(file, len(members), me)
	if err != nil {
		return nil, fmt.Errorf("shm: newgroup %q: %w", name, err)
	}
	child := w.newGroup(key, seg, members, me)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		child.shutdown(false)
		return nil, fmt.Errorf("shm: newgroup %q: %w", name, comm.ErrClosed)
	}
	g.children = append(g.children, child)
	return child, nil
}

// attach opens or creates a group segment and claims member me's slot;
// the last member to attach removes the file.
func (w *world) attach(file string, p, me int) (*segment, error) {
	c := w.cfg
	l := newLayout(p, c.SliceBytes, c.Depth, c.RingBytes)
	var seg *segment
	for seg == nil {
		s, err := openSegment(filepath.Join(c.Dir, file))
		if errors.Is(err, os.ErrNotExist) {
			s, err = createSegment(c.Dir, file, l, w.seg.nonce())
			if errors.Is(err, errExists) {
				continue
			}
		}
		if err != nil {
			return nil, err
		}
		seg = s
	}
	if seg.l != l {
		seg.unmap()
		return nil, fmt.Errorf("%s: layout differs from this rank's", seg.path)
	}
	seg.m.u32(l.member(me) + mPid).Store(uint32(w.pid))
	seg.m.u32(l.member(me) + mState).Store(stateAttached)
	if int(seg.m.u32(hAttached).Add(1)) == p {
		seg.unlink()
	}
	return seg, nil
}

// Close closes the groups made from this one, then breaks this group for
// its peers with a *comm.PeerError naming this rank and stops its queue:
// pending operations fail with ErrClosed. Closing the world group closes
// the world: every segment is unmapped. Closing twice is harmless.
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
	for _, k := range kids {
		k.Close()
	}
	g.shutdown(true)
	if g.world {
		g.w.shutdown()
	}
	return nil
}

// shutdown marks this member closed and, if announce, breaks the group
// naming it; then it fails this member's pending work and stops the queue.
func (g *group) shutdown(announce bool) {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.seg.m.u32(g.l().member(g.me) + mState).Store(stateClosed)
	if announce {
		g.fail(kindClosed, g.me, "close", "closed its group")
	}
	g.q.Close()
	g.in.failAll(g, comm.ErrClosed)
	for q := range g.out {
		g.out[q].failAll(comm.ErrClosed)
	}
	g.w.unregister(g)
}

func (g *group) isClosed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

// submit queues a collective; an operation of a group this rank has
// closed reports ErrClosed rather than the break its closing caused.
func (g *group) submit(bytes int, fn func() error) comm.Work {
	return g.q.Submit(bytes, func() error {
		err := fn()
		if err == nil {
			err = g.in.pollErr(g)
		}
		return g.ownErr(err)
	})
}

func (g *group) ownErr(err error) error {
	if err != nil && g.isClosed() {
		return comm.ErrClosed
	}
	return err
}

// argErr is a finished Work for an argument error.
func argErr(err error) comm.Work { return comm.Done(fmt.Errorf("shm: %w", err)) }

func (g *group) AllReduce(b comm.Buf, op comm.ReduceOp) comm.Work {
	if err := comm.CheckAllReduce(b, op); err != nil {
		return argErr(err)
	}
	return g.submit(b.Bytes(), func() error { return g.allReduce(b, op) })
}

func (g *group) ReduceScatter(dst, src comm.Buf, op comm.ReduceOp) comm.Work {
	if err := comm.CheckReduceScatter(dst, src, op, g.me, g.Size()); err != nil {
		return argErr(err)
	}
	return g.submit(src.Bytes(), func() error { return g.reduceScatter(dst, src, op) })
}

func (g *group) AllGather(dst, src comm.Buf) comm.Work {
	if err := comm.CheckAllGather(dst, src, g.me, g.Size()); err != nil {
		return argErr(err)
	}
	return g.submit(dst.Bytes(), func() error { return g.allGather(dst, src) })
}

func (g *group) Broadcast(b comm.Buf, root int) comm.Work {
	if err := comm.CheckBroadcast(b, root, g.Size()); err != nil {
		return argErr(err)
	}
	return g.submit(b.Bytes(), func() error { return g.broadcast(b, root) })
}

func (g *group) AllToAll(dst, src comm.Buf) comm.Work {
	if err := comm.CheckAllToAll(dst, src, g.Size()); err != nil {
		return argErr(err)
	}
	return g.submit(src.Bytes(), func() error { return g.allToAll(dst, src) })
}

func (g *group) Barrier() comm.Work { return g.submit(0, g.barrier) }
