package comm

import "errors"

// DefaultMaxBuffered is the default bound, in bytes, on messages a rank
// holds for receives not yet posted (per peer connection in comm/tcp, per
// receiving rank and group in comm/local).
const DefaultMaxBuffered = 256 << 20

// P2POp is one send or receive of a batch (see BatchP2P).
type P2POp struct {
	Recv bool // a receive into Buf; else a send of Buf
	Buf  Buf
	Peer int // group rank of the other side
	Tag  int // 0 ≤ Tag < MaxTag
}

// SendOp is a send of buf to peer with tag.
func SendOp(buf Buf, peer, tag int) P2POp { return P2POp{Buf: buf, Peer: peer, Tag: tag} }

// RecvOp is a receive into buf from peer with tag.
func RecvOp(buf Buf, peer, tag int) P2POp { return P2POp{Recv: true, Buf: buf, Peer: peer, Tag: tag} }

// BatchP2P issues every op of the batch, in order, and returns one Work that
// is done when all of them are (like torch.distributed.batch_isend_irecv).
// Because sends and receives never wait for the queue or for each other,
// any mix and order of ops is deadlock-free as long as every receive has a
// matching send somewhere in the world. The Work's error joins the ops'
// errors; the buffers of all ops belong to the
// batch until Wait returns.
func BatchP2P(g Group, ops []P2POp) Work {
	ws := make([]Work, len(ops))
	for i, o := range ops {
		if o.Recv {
			ws[i] = g.Recv(o.Buf, o.Peer, o.Tag)
		} else {
			ws[i] = g.Send(o.Buf, o.Peer, o.Tag)
		}
	}
	return batch(ws)
}

// batch waits for every Work and joins their errors.
type batch []Work

func (b batch) Wait() error {
	var errs []error
	for _, w := range b {
		if err := w.Wait(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// SendRecv sends send to dst and receives recv from src, both with tag, and
// waits for both: the exchange step of a ring or a pipeline, deadlock-free
// whatever the peers issue first.
func SendRecv(g Group, send Buf, dst int, recv Buf, src, tag int) error {
	return BatchP2P(g, []P2POp{RecvOp(recv, src, tag), SendOp(send, dst, tag)}).Wait()
}
