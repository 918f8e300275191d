package local

import (
	"fmt"
	"time"
)

// Link is one class of link: its bandwidth in bytes per second (0 means
// unlimited) and its latency per transfer.
type Link struct {
	Bandwidth float64
	Latency   time.Duration
}

// LinkModel emulates a network of nodes of RanksPerNode consecutive ranks:
// Intra applies between ranks of one node, Inter between nodes. The package
// documentation states the model.
type LinkModel struct {
	RanksPerNode int // 0 means one node holds every rank
	Intra, Inter Link
	// SharedPorts makes the point-to-point messages of every group from
	// world rank a to world rank b share one link (otherwise each group
	// has its own): concurrent transfers on two groups of the same ranks
	// (train's ep_overlap=on, its two ep groups) queue as on one port.
	SharedPorts bool
}

// Validate checks that no field is negative.
func (m *LinkModel) Validate() error {
	switch {
	case m.RanksPerNode < 0:
		return fmt.Errorf("local: Link.RanksPerNode=%d must not be negative", m.RanksPerNode)
	case m.Intra.Bandwidth < 0 || m.Inter.Bandwidth < 0:
		return fmt.Errorf("local: Link bandwidths (intra %g, inter %g) must not be negative", m.Intra.Bandwidth, m.Inter.Bandwidth)
	case m.Intra.Latency < 0 || m.Inter.Latency < 0:
		return fmt.Errorf("local: Link latencies (intra %v, inter %v) must not be negative", m.Intra.Latency, m.Inter.Latency)
	}
	return nil
}

// sameNode reports whether world ranks a and b share a node.
func (m *LinkModel) sameNode(a, b int) bool {
	return m.RanksPerNode == 0 || a/m.RanksPerNode == b/m.RanksPerNode
}

// between is the link between world ranks a and b.
func (m *LinkModel) between(a, b int) Link {
	if m.sameNode(a, b) {
		return m.Intra
	}
	return m.Inter
}

// occupancy is the time n bytes occupy the link: n/B (0 when the
// bandwidth is unlimited).
func (l Link) occupancy(n int64) time.Duration {
	if l.Bandwidth <= 0 {
		return 0
	}
	return time.Duration(float64(n) / l.Bandwidth * float64(time.Second))
}

// Cost is the modelled duration of one phase for world rank me, whose
// transfers with peer i (world rank peers[i]) are given by xfer: bytes sent,
// bytes received, and whether the pair exchanges anything in this phase.
//
//	T = max over classes c used of ( L_c + max(S_c, R_c) / B_c )
func (m *LinkModel) Cost(me int, peers []int, xfer func(i int) (send, recv int64, ok bool)) time.Duration {
	var send, recv [2]int64
	var used [2]bool
	for i, w := range peers {
		if w == me {
			continue
		}
		s, r, ok := xfer(i)
		if !ok {
			continue
		}
		c := 1
		if m.sameNode(me, w) {
			c = 0
		}
		send[c] += s
		recv[c] += r
		used[c] = true
	}
	var t time.Duration
	for c, l := range [2]Link{m.Intra, m.Inter} {
		if !used[c] {
			continue
		}
		d := l.Latency
		if l.Bandwidth > 0 {
			d += time.Duration(float64(max(send[c], recv[c])) / l.Bandwidth * float64(time.Second))
		}
		t = max(t, d)
	}
	return t
}

// emulate sleeps until the modelled time of a phase that began at start has
// passed; xfer describes this member's transfers with member q. The
// operation's first phase begins when its last member posted it, or when
// this member's link is free of the operation before, whichever is later —
// not when the member's goroutine got a core to run it: the emulated
// network moves the bytes as a NIC does, while the ranks compute, and on
// cores the ranks keep busy the goroutine may run much later (the wait
// then is only the hand-off and the copies). Later phases begin at start.
func (g *group) emulate(start time.Time, xfer func(q int) (send, recv int64, ok bool)) {
	m := g.w.cfg.Link
	if m == nil {
		return
	}
	if !g.posted.IsZero() {
		start = g.posted
		g.posted = time.Time{}
	}
	if g.wire.After(start) {
		start = g.wire
	}
	end := start.Add(m.Cost(g.t.ranks[g.rank], g.t.ranks, xfer))
	g.wire = end
	g.t.waitOrBreak(end)
}
