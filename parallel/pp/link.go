package pp

import (
	"fmt"

	"trellis/comm"
)

// Link moves a stage's boundary tensors between pipeline ranks: Send and
// Recv of activations (grad false) or gradients (grad true) to and from
// the pipeline rank peer. A rank issues its sends and receives in its
// schedule's order; sends never wait for the receiver. The executor knows
// nothing else of the transport, so a batched point-to-point API in comm
// replaces GroupLink in this one file.
type Link interface {
	Send(buf []float32, peer int, grad bool) comm.Work
	Recv(buf []float32, peer int, grad bool) comm.Work
	Stats() comm.Stats
	Close() error
}

// GroupLink is a Link over one two-rank group per direction and kind:
// "pp.act.A-B" carries activations from world rank A to B, "pp.grad.B-A"
// gradients back. A group runs its operations one at a time in issue
// order, so a receive waiting on a group that also carried this rank's
// sends could block them; with one direction per group each queue holds
// only sends or only receives, issued in the same order on both ends.
type GroupLink struct {
	groups map[linkKey]comm.Group
}

type linkKey struct {
	peer       int
	grad, send bool
}

// NewGroupLink makes the groups pipeline rank me of pipe (the world ranks
// of the pipeline, in stage order) needs: to and from its neighbours, and
// with vpp > 1 between the last rank and the first.
func NewGroupLink(world comm.Group, pipe []int, me, vpp int) (*GroupLink, error) {
	p := len(pipe)
	l := &GroupLink{groups: map[linkKey]comm.Group{}}
	wrap := vpp > 1
	next, prev := (me+1)%p, (me-1+p)%p
	add := func(kind string, from, to int, k linkKey) error {
		name := fmt.Sprintf("pp.%s.%d-%d", kind, pipe[from], pipe[to])
		g, err := world.NewGroup(name, []int{pipe[from], pipe[to]})
		if err != nil {
			l.Close()
			return fmt.Errorf("pp: group %s: %w", name, err)
		}
		l.groups[k] = g
		return nil
	}
	type dir struct {
		ok       bool
		kind     string
		from, to int
		k        linkKey
	}
	for _, d := range []dir{
		{me < p-1 || wrap, "act", me, next, linkKey{peer: next, send: true}},
		{me > 0 || wrap, "act", prev, me, linkKey{peer: prev}},
		{me > 0 || wrap, "grad", me, prev, linkKey{peer: prev, grad: true, send: true}},
		{me < p-1 || wrap, "grad", next, me, linkKey{peer: next, grad: true}},
	} {
		if d.ok && p > 1 {
			if err := add(d.kind, d.from, d.to, d.k); err != nil {
				return nil, err
			}
		}
	}
	return l, nil
}

func (l *GroupLink) group(peer int, grad, send bool) (comm.Group, error) {
	g, ok := l.groups[linkKey{peer, grad, send}]
	if !ok {
		return nil, fmt.Errorf("%w: pp: no link to pipeline rank %d (grad %v, send %v)", comm.ErrArgs, peer, grad, send)
	}
	return g, nil
}

// Send issues buf to pipeline rank peer.
func (l *GroupLink) Send(buf []float32, peer int, grad bool) comm.Work {
	g, err := l.group(peer, grad, true)
	if err != nil {
		return failed{err}
	}
	return g.Send(comm.F32(buf), 1, 0)
}

// Recv issues a receive of buf from pipeline rank peer.
func (l *GroupLink) Recv(buf []float32, peer int, grad bool) comm.Work {
	g, err := l.group(peer, grad, false)
	if err != nil {
		return failed{err}
	}
	return g.Recv(comm.F32(buf), 0, 0)
}

// Stats sums the groups' accounting.
func (l *GroupLink) Stats() comm.Stats {
	var s comm.Stats
	for _, g := range l.groups {
		s = s.Add(g.Stats())
	}
	return s
}

// Close closes every group.
func (l *GroupLink) Close() error {
	var first error
	for k, g := range l.groups {
		if err := g.Close(); err != nil && first == nil {
			first = err
		}
		delete(l.groups, k)
	}
	return first
}

// failed is a Work that failed before it was issued.
type failed struct{ err error }

func (f failed) Wait() error { return f.err }
