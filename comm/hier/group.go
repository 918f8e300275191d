package hier

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"trellis/comm"
)

// group is a hierarchical group: members on several hosts, some sharing
// one.
type group struct {
	n       *net
	key     string
	members []int // world ranks, in group order
	me      int
	world   bool // the hierarchy's world group: Close closes both worlds
	q       *comm.Queue

	runs  []run // maximal stretches of consecutive members on one host
	myRun int
	local []int // members (group ranks) on this host, in group order
	heads []int // every host's first member (group rank), by first appearance

	// Sub-groups (their own queues, used only by this group's operations,
	// one at a time, except the point-to-point ones).
	hostG   comm.Group // the members on this host (Intra)
	runG    comm.Group // this member's run (Intra)
	crossG  comm.Group // every member (Inter): the collectives' messages
	headsG  comm.Group // the hosts' first members (Inter); nil unless one
	p2pG    comm.Group // every member (Inter): Send and Recv across hosts
	scratch []float32
	// awaiting is the world rank the running collective last waited on
	// directly (-1: none yet), for reblame.
	awaiting int

	mu       sync.Mutex
	closed   bool
	children []comm.Group
}

// run is members first..last (group ranks), all on one host.
type run struct{ first, last int }

var _ comm.Group = (*group)(nil)

func (n *net) newGroup(key string, members []int) (*group, error) {
	g := &group{n: n, key: key, members: members, me: slices.Index(members, n.me), q: comm.NewQueue()}
	myHost := n.hosts[n.me]
	seen := map[int]bool{}
	for i, m := range members {
		h := n.hosts[m]
		if i == 0 || n.hosts[members[i-1]] != h {
			g.runs = append(g.runs, run{i, i})
		}
		g.runs[len(g.runs)-1].last = i
		if i == g.me {
			g.myRun = len(g.runs) - 1
		}
		if h == myHost {
			g.local = append(g.local, i)
		}
		if !seen[h] {
			seen[h] = true
			g.heads = append(g.heads, i)
		}
	}
	r := g.runs[g.myRun]
	var errs []error
	mk := func(name string, ms []int, intra bool) comm.Group {
		var sg comm.Group
		var err error
		if intra {
			sg, err = n.intra.NewGroup(key+"/"+name, n.intraRanks(g.worldOf(ms)))
		} else {
			sg, err = n.inter.NewGroup(key+"/"+name, g.worldOf(ms))
		}
		errs = append(errs, err)
		return sg
	}
	g.hostG = mk("host", g.local, true)
	g.runG = mk("run", span(r.first, r.last), true)
	all := span(0, len(members)-1)
	g.crossG = mk("cross", all, false)
	g.p2pG = mk("p2p", all, false)
	if slices.Contains(g.heads, g.me) {
		g.headsG = mk("heads", g.heads, false)
	}
	if err := errors.Join(errs...); err != nil {
		g.closeSubs()
		g.q.Close()
		return nil, fmt.Errorf("hier: group %s: %w", key, err)
	}
	return g, nil
}

func span(lo, hi int) []int {
	out := make([]int, 0, hi-lo+1)
	for i := lo; i <= hi; i++ {
		out = append(out, i)
	}
	return out
}

// world maps group ranks to world ranks.
func (g *group) worldOf(ms []int) []int {
	out := make([]int, len(ms))
	for i, m := range ms {
		out[i] = g.members[m]
	}
	return out
}

func (g *group) Rank() int          { return g.me }
func (g *group) Size() int          { return len(g.members) }
func (g *group) GlobalRanks() []int { return slices.Clone(g.members) }

func (g *group) hostOf(member int) int { return g.n.hosts[g.members[member]] }

// Stats is this group's queue (its collectives and its point-to-point
// operations) and the bytes its point-to-point groups buffer.
func (g *group) Stats() comm.Stats {
	s := g.q.Stats()
	s.Buffered = g.hostG.Stats().Buffered + g.p2pG.Stats().Buffered
	return s
}

// NewGroup makes the subgroup of the listed members: an Intra group, an
// Inter group or a hierarchical one, by where they are (no communication:
// both transports make groups without it, and MPI's, which communicate,
// are made in the same order on every member).
func (g *group) NewGroup(name string, ranks []int) (comm.Group, error) {
	if _, err := comm.CheckNewGroup(name, ranks, g.me, g.Size()); err != nil {
		return nil, fmt.Errorf("hier: %w", err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, fmt.Errorf("hier: newgroup %q: %w", name, comm.ErrClosed)
	}
	ms := g.worldOf(ranks)
	sub, err := g.n.sub(fmt.Sprintf("%s/%q%v", g.key, name, ms), ms)
	if err != nil {
		return nil, fmt.Errorf("hier: newgroup %q: %w", name, err)
	}
	g.children = append(g.children, sub)
	return sub, nil
}

// Close closes the groups made from this one and this group's sub-groups
// (breaking them for the peers, naming this rank); the world group also
// closes both worlds.
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
	g.closeSubs()
	g.q.Close()
	if g.world {
		return errors.Join(g.n.intra.Close(), g.n.inter.Close())
	}
	return nil
}

func (g *group) closeSubs() {
	for _, sg := range []comm.Group{g.hostG, g.runG, g.crossG, g.headsG, g.p2pG} {
		if sg != nil {
			sg.Close()
		}
	}
}

// abort breaks this group's intra-host groups with err, so that members
// of this host waiting there for this one fail with the same error, and
// the inter-host world, so that the ranks of other hosts learn which rank
// failed: without it a rank that lost a node-mate fails, closes its
// worlds in good order, and the other hosts name it, alive, instead of
// the node-mate that died (TestNetnsKillRestart, 1 run in 40). A
// transport without Abort is left to fail on its own.
func (g *group) abort(err error) {
	for _, sg := range []comm.Group{g.hostG, g.runG, g.n.inter} {
		if a, ok := sg.(interface{ Abort(error) }); ok {
			a.Abort(err)
		}
	}
}

// submit queues a collective; its failure aborts the intra-host groups.
// A collective ends with a barrier of every member on Inter (the fence):
// its phases end at different times on different members (the last run's
// first member is still sending the result when the others have theirs),
// and a member that returned and closed its groups would otherwise break
// the sends still in flight on a transport whose Close breaks the group
// for every member (comm/local's does). The fence costs one barrier's
// latency on Inter per collective of a hierarchical group.
func (g *group) submit(bytes int, fn func() error) comm.Work {
	return g.q.Submit(bytes, func() error {
		g.awaiting = -1
		err := fn()
		if err == nil {
			err = comm.Barrier(g.crossG)
		}
		err = g.reblame(err)
		if err != nil {
			g.abort(err)
		}
		return err
	})
}

// reblame turns an error that names this rank itself — a peer waiting on
// it (transitively: this rank was waiting on another) found it silent —
// into one naming the rank this one was waiting on, if it knows.
func (g *group) reblame(err error) error {
	var pe *comm.PeerError
	if g.awaiting < 0 || !errors.As(err, &pe) || pe.Rank != g.n.me {
		return err
	}
	return &comm.PeerError{Rank: g.awaiting, Op: pe.Op,
		Err: fmt.Errorf("%w (a peer gave up on world rank %d while it waited for world rank %d)", pe.Err, g.n.me, g.awaiting)}
}

// await records that the operation now waits on member q.
func (g *group) await(q int) { g.awaiting = g.members[q] }

// Send and Recv go to a peer on this host over Intra, else over Inter,
// outside this group's queue.
func (g *group) Send(b comm.Buf, peer, tag int) comm.Work {
	return g.p2p("send", b, peer, tag, func(sg comm.Group, p int) comm.Work { return sg.Send(b, p, tag) })
}

func (g *group) Recv(b comm.Buf, peer, tag int) comm.Work {
	return g.p2p("recv", b, peer, tag, func(sg comm.Group, p int) comm.Work { return sg.Recv(b, p, tag) })
}

func (g *group) p2p(op string, b comm.Buf, peer, tag int, do func(sg comm.Group, p int) comm.Work) comm.Work {
	if err := comm.CheckP2P(op, peer, tag, g.Size()); err != nil {
		return comm.Done(fmt.Errorf("hier: %w", err))
	}
	w, finish, err := g.q.Start(b.Bytes())
	if err != nil {
		return comm.Done(err)
	}
	var sw comm.Work
	if g.hostOf(peer) == g.hostOf(g.me) {
		sw = do(g.hostG, slices.Index(g.local, peer))
	} else {
		sw = do(g.p2pG, peer)
	}
	go func() { finish(sw.Wait()) }()
	return w
}

func (g *group) AllReduce(b comm.Buf, op comm.ReduceOp) comm.Work {
	if err := comm.CheckAllReduce(b, op); err != nil {
		return comm.Done(fmt.Errorf("hier: %w", err))
	}
	return g.submit(b.Bytes(), func() error { return g.allReduce(b, op) })
}

func (g *group) ReduceScatter(dst, src comm.Buf, op comm.ReduceOp) comm.Work {
	if err := comm.CheckReduceScatter(dst, src, op, g.me, g.Size()); err != nil {
		return comm.Done(fmt.Errorf("hier: %w", err))
	}
	return g.submit(src.Bytes(), func() error { return g.reduceScatter(dst, src, op) })
}

func (g *group) AllGather(dst, src comm.Buf) comm.Work {
	if err := comm.CheckAllGather(dst, src, g.me, g.Size()); err != nil {
		return comm.Done(fmt.Errorf("hier: %w", err))
	}
	return g.submit(dst.Bytes(), func() error { return g.allGather(dst, src) })
}

func (g *group) Broadcast(b comm.Buf, root int) comm.Work {
	if err := comm.CheckBroadcast(b, root, g.Size()); err != nil {
		return comm.Done(fmt.Errorf("hier: %w", err))
	}
	return g.submit(b.Bytes(), func() error { return g.broadcast(b, root) })
}

func (g *group) AllToAll(dst, src comm.Buf) comm.Work {
	if err := comm.CheckAllToAll(dst, src, g.Size()); err != nil {
		return comm.Done(fmt.Errorf("hier: %w", err))
	}
	return g.submit(src.Bytes(), func() error { return g.allToAll(dst, src) })
}

func (g *group) Barrier() comm.Work { return g.submit(0, g.barrier) }
