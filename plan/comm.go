package plan

import (
	"math"
	"strings"
)

// group describes where the members of a communication group sit: n ranks,
// k of them on each node they span (so n/k nodes).
type group struct {
	n, k int
	// hidden is the part of a collective's latency that the other ranks'
	// work hides on a CPU host whose ranks outnumber its cores (1 −
	// Job.hostFill of the group: the cores its blocked members leave to
	// them stay busy); 0 elsewhere.
	hidden float64
}

func (g group) nodes() int { return (g.n + g.k - 1) / g.k }

// Axis indices into placement arrays.
const (
	axTP = iota
	axCP
	axDP
	axPP
)

// placement is where each parallel group of a plan sits on the nodes.
type placement struct {
	tp, cp, dp, pp group // dp is the gradient group dp×cp (the ranks holding the same parameters)
}

// place lays the plan's mesh out as package mesh does (axes in Order,
// fastest first; node = ⌊rank / devicesPerNode⌋) and counts, for each group,
// how many of its members share rank 0's node.
func place(p Plan, devicesPerNode int) placement {
	size := [4]int{p.TP, p.CP, p.DP, p.PP}
	var stride [4]int
	s := 1
	for _, name := range strings.Split(p.Order, "-") {
		ax := axisIndex(name)
		stride[ax] = s
		s *= size[ax]
	}
	in := func(axes ...int) group {
		n := 1
		for _, a := range axes {
			n *= size[a]
		}
		k := countInNode(size, stride, axes, 0, devicesPerNode)
		return group{n: n, k: k}
	}
	return placement{tp: in(axTP), cp: in(axCP), dp: in(axDP, axCP), pp: in(axPP)}
}

func axisIndex(name string) int {
	switch name {
	case "tp":
		return axTP
	case "cp":
		return axCP
	case "dp":
		return axDP
	}
	return axPP
}

// countInNode counts the members of the group along axes that contain rank
// 0 and have rank offset < node, i.e. share node 0. Offsets grow with each
// coordinate, so the walk stops at the node boundary (at most node steps).
func countInNode(size, stride [4]int, axes []int, offset, node int) int {
	if offset >= node {
		return 0
	}
	if len(axes) == 0 {
		return 1
	}
	a := axes[0]
	c := 0
	for i := 0; i < size[a] && offset+i*stride[a] < node; i++ {
		c += countInNode(size, stride, axes[1:], offset+i*stride[a], node)
	}
	return c
}

// ring is a ring reduce-scatter or all-gather of a buffer of S bytes (the
// full buffer, not one rank's part) over n ranks on one link class:
//
//	t = (n-1)·α + (n-1)/n · S/β
func ring(S float64, n int, l Link) float64 {
	if n <= 1 || S <= 0 {
		return 0
	}
	f := float64(n - 1)
	return f*l.Latency + f/float64(n)*S/l.BW
}

// flatAllReduce is the better of a ring (reduce-scatter + all-gather) and a
// double binary tree (2·⌈log2 n⌉·α + 2·S/β, NCCL's choice for small
// messages at large n).
func flatAllReduce(S float64, n int, l Link) float64 {
	if n <= 1 || S <= 0 {
		return 0
	}
	tree := 2*math.Ceil(math.Log2(float64(n)))*l.Latency + 2*S/l.BW
	return math.Min(2*ring(S, n, l), tree)
}

// Collectives on a group. A group inside one node uses the intra-node link;
// one with a single member per node is a flat collective over the
// inter-node link (one NIC rail per device); otherwise it is hierarchical:
// a reduce-scatter inside each node over its k members, the operation over
// the n/k nodes on S/k bytes per rail (all k rails at once), then an
// all-gather inside the node — or, when the cluster's software runs flat
// rings (Software.FlatRings), one ring through all n members.
func (c Cluster) reduceScatter(S float64, g group) float64 {
	switch {
	case g.n <= 1:
		return 0
	case g.nodes() == 1 && c.Cores > 0:
		// A CPU host's goroutine ranks: a collective costs one hand-off
		// between its members whatever the operation (comm/local: one
		// rendezvous and one barrier), which the profile measures on an
		// all-reduce and writes as the α of 2(n−1) steps: a
		// reduce-scatter or all-gather pays the same, not half.
		l := c.intra(g)
		return ring(S, g.n, l) + float64(g.n-1)*l.Latency
	case g.nodes() == 1:
		return ring(S, g.n, c.Intra)
	case g.k == 1:
		return ring(S, g.n, c.Inter)
	case c.Software.FlatRings:
		return c.flatRing(S, g)
	}
	return ring(S, g.k, c.Intra) + ring(S/float64(g.k), g.nodes(), c.Inter)
}

func (c Cluster) allGather(S float64, g group) float64 { return c.reduceScatter(S, g) }

func (c Cluster) allReduce(S float64, g group) float64 {
	switch {
	case g.n <= 1:
		return 0
	case g.nodes() == 1:
		return flatAllReduce(S, g.n, c.intra(g))
	case g.k == 1:
		return flatAllReduce(S, g.n, c.Inter)
	case c.Software.FlatRings:
		return c.flatRingAllReduce(S, g)
	}
	return 2*ring(S, g.k, c.Intra) + flatAllReduce(S/float64(g.k), g.nodes(), c.Inter)
}

// link is the link a point-to-point hop or a ring step of group g crosses
// at worst: intra-node only when the whole group fits in one node.
func (c Cluster) link(g group) Link {
	if g.nodes() <= 1 {
		return c.intra(g)
	}
	return c.Inter
}

// intra is the intra-node link as group g's collectives meet it: its
// latency less the part other ranks' work hides (group.hidden).
func (c Cluster) intra(g group) Link {
	l := c.Intra
	l.Latency *= 1 - g.hidden
	return l
}

// p2p is one point-to-point transfer of S bytes: α + S/β.
func p2p(S float64, l Link) float64 { return l.Latency + S/l.BW }
