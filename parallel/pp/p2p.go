package pp

import (
	"fmt"

	"trellis/comm"
)

// Tags of the pipeline's point-to-point messages: activations forward,
// their gradients back. A message is matched by (sender, receiver, tag),
// first in first out, so each (direction, kind) is its own ordered channel.
const (
	TagAct  = 1
	TagGrad = 2
)

// P2PLink is a Link over comm's point-to-point operations on one group of
// the pipeline's ranks (group rank = pipeline rank). Sends and receives do
// not occupy the group's queue and never wait for each other (comm's
// ordering rules), so a stage posts its receives before its sends, as the
// schedules do, without deadlock, and several transfers of one stage are in
// flight at once. Each transfer is posted alone (what comm.BatchP2P does
// for a batch of one): the executor waits for each where the schedule
// needs it and reuses its buffer as soon as it is done, which one Work for
// a batch of several would delay to the slowest.
//
// Messages that arrive before their receive is posted are held by the
// receiver, bounded by the backend's MaxBuffered; Stats().Buffered is the
// gauge the Stage charges to its device's comm tag.
type P2PLink struct {
	g  comm.Group
	pl Placement // where the stages live: which neighbours this rank talks to
	me int
}

// NewP2PLink makes the point-to-point group of pipeline rank me of pipe
// (the world ranks of the pipeline, in stage order), named
// "pp.p2p."+name; every rank of the pipeline calls it with the same name.
// With vpp > 1 the last rank also sends to the first (chunk c+1 follows
// chunk c).
func NewP2PLink(world comm.Group, name string, pipe []int, me, vpp int) (*P2PLink, error) {
	return newP2PLink(world, name, pipe, me, Placement{PP: len(pipe), VPP: max(vpp, 1)})
}

// NewLayoutLink is NewP2PLink for the placement of pipeline layout l (l.Rank
// is the rank's index in pipe): DualPipeV's V sends activations down the
// ranks on chunk 0 and up on chunk 1, gradients the other way.
func NewLayoutLink(world comm.Group, name string, pipe []int, l Layout) (*P2PLink, error) {
	if l.PP != len(pipe) {
		return nil, fmt.Errorf("pp: layout of pp=%d for a pipeline of %d ranks", l.PP, len(pipe))
	}
	return newP2PLink(world, name, pipe, l.Rank, l.Placement())
}

func newP2PLink(world comm.Group, name string, pipe []int, me int, pl Placement) (*P2PLink, error) {
	p := len(pipe)
	if me < 0 || me >= p {
		return nil, fmt.Errorf("pp: pipeline rank %d outside the pipeline of %d ranks", me, p)
	}
	g, err := world.NewGroup("pp.p2p."+name, pipe)
	if err != nil {
		return nil, fmt.Errorf("pp: point-to-point group: %w", err)
	}
	return &P2PLink{g: g, pl: pl, me: me}, nil
}

// check says whether the schedule may move data between this rank and
// peer in that direction: a chunk of this rank must have peer's stage as
// its neighbour, after it for activations sent or gradients received,
// before it for activations received or gradients sent (across the wrap
// only with vpp > 1; never to itself: a local hop is no message).
func (l *P2PLink) check(peer int, grad, send bool) error {
	forward := send != grad // activations sent or gradients received: towards the next stage
	ok := false
	for c := 0; c < max(l.pl.VPP, 1) && !ok; c++ {
		prev, next := l.pl.Neighbours(l.me, c)
		h := prev
		if forward {
			h = next
		}
		ok = h.Remote(l.me) && h.Rank == peer
	}
	if l.pl.PP < 2 || !ok {
		return fmt.Errorf("%w: pp: no link to pipeline rank %d from rank %d (grad %v, send %v)", comm.ErrArgs, peer, l.me, grad, send)
	}
	return nil
}

func tag(grad bool) int {
	if grad {
		return TagGrad
	}
	return TagAct
}

// Send posts buf to pipeline rank peer.
func (l *P2PLink) Send(buf []float32, peer int, grad bool) comm.Work {
	if err := l.check(peer, grad, true); err != nil {
		return failed{err}
	}
	return l.g.Send(comm.F32(buf), peer, tag(grad))
}

// Recv posts a receive of buf from pipeline rank peer.
func (l *P2PLink) Recv(buf []float32, peer int, grad bool) comm.Work {
	if err := l.check(peer, grad, false); err != nil {
		return failed{err}
	}
	return l.g.Recv(comm.F32(buf), peer, tag(grad))
}

// Stats is the group's accounting, Buffered included.
func (l *P2PLink) Stats() comm.Stats { return l.g.Stats() }

// Close closes the group.
func (l *P2PLink) Close() error { return l.g.Close() }
