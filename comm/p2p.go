package comm

import (
	"errors"
	"fmt"

	"trellis/tensor"
)

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

// AllToAllV exchanges segments of any lengths between every pair of ranks
// (MPI's all-to-all-v, the token exchange of expert parallelism): src is
// p segments, segment j of sendCounts[j] elements going to rank j; dst is
// p segments, segment i of recvCounts[i] elements coming from rank i;
// sendCounts[j] on rank i must equal recvCounts[i] on rank j. Rank r's own
// segment is copied locally; the others travel as point-to-point messages
// with tag (outside the group's queue, so any rank may issue it at any
// time relative to the group's collectives; use a tag no other message
// in flight on the group uses). It blocks until this rank's sends and
// receives are done.
func AllToAllV(g Group, dst, src Buf, sendCounts, recvCounts []int, tag int) error {
	p, me := g.Size(), g.Rank()
	if err := checkAllToAllV(dst, src, sendCounts, recvCounts, p); err != nil {
		return err
	}
	var ops []P2POp
	so, ro := 0, 0
	for j := 0; j < p; j++ {
		s, d := src.Slice(so, so+sendCounts[j]), dst.Slice(ro, ro+recvCounts[j])
		if j == me {
			copyBuf(d, s)
		} else {
			ops = append(ops, RecvOp(d, j, tag), SendOp(s, j, tag))
		}
		so, ro = so+sendCounts[j], ro+recvCounts[j]
	}
	return BatchP2P(g, ops).Wait()
}

// checkAllToAllV checks the counts against the buffers.
func checkAllToAllV(dst, src Buf, sendCounts, recvCounts []int, p int) error {
	if len(sendCounts) != p || len(recvCounts) != p {
		return fmt.Errorf("%w: alltoallv: %d send and %d receive counts for a group of %d", ErrArgs, len(sendCounts), len(recvCounts), p)
	}
	if dst.DType() != src.DType() {
		return fmt.Errorf("%w: alltoallv: dst is %v but src is %v", ErrArgs, dst.DType(), src.DType())
	}
	var ns, nr int
	for j := 0; j < p; j++ {
		if sendCounts[j] < 0 || recvCounts[j] < 0 {
			return fmt.Errorf("%w: alltoallv: counts to or from rank %d are negative (%d, %d)", ErrArgs, j, sendCounts[j], recvCounts[j])
		}
		ns, nr = ns+sendCounts[j], nr+recvCounts[j]
	}
	if ns != src.Len() || nr != dst.Len() {
		return fmt.Errorf("%w: alltoallv: the send counts sum to %d for len(src)=%d, the receive counts to %d for len(dst)=%d",
			ErrArgs, ns, src.Len(), nr, dst.Len())
	}
	if overlap(dst, src) {
		return fmt.Errorf("%w: alltoallv: dst and src overlap", ErrArgs)
	}
	return nil
}

// copyBuf copies src into dst (one dtype and length).
func copyBuf(dst, src Buf) {
	if dst.DType() == tensor.BF16 {
		copy(dst.BFloat16s(), src.BFloat16s())
		return
	}
	copy(dst.Float32s(), src.Float32s())
}
