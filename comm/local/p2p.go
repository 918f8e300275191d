package local

import (
	"fmt"
	"time"

	"trellis/comm"
	"trellis/tensor"
)

// mailKey identifies a message stream: messages from src to dst with tag
// arrive in the order sent.
type mailKey struct{ src, dst, tag int }

// recvReq is a posted Recv waiting for its message.
type recvReq struct {
	src, tag int
	buf      comm.Buf
	done     chan error // receives the outcome once a sender has copied
	claimed  bool       // a sender took the request (guarded by team.mu)
}

// send delivers buf to member peer: straight into its buffer when the
// matching Recv is posted, otherwise as a copy in its mailbox. It never waits
// for the receiver. With link emulation the transfer time passes first.
func (g *group) send(buf comm.Buf, peer, tag int) error {
	t := g.t
	if m := g.w.cfg.Link; m != nil {
		bytes := int64(buf.Bytes())
		d := m.Cost(t.ranks[g.rank], t.ranks, func(q int) (int64, int64, bool) {
			return bytes, 0, q == peer
		})
		t.waitOrBreak(time.Now().Add(d))
	}
	t.mu.Lock()
	req, err := t.takeLocked(g.rank, peer, tag)
	t.mu.Unlock()
	if req != nil || err != nil {
		return fill(req, buf, err)
	}
	msg := cloneBuf(buf) // outside the lock: it may be large
	t.mu.Lock()
	// The Recv may have been posted while we copied.
	if req, err = t.takeLocked(g.rank, peer, tag); req == nil && err == nil {
		k := mailKey{g.rank, peer, tag}
		t.mail[k] = append(t.mail[k], msg)
	}
	t.mu.Unlock()
	return fill(req, buf, err)
}

// takeLocked claims member dst's posted Recv if it waits for (src, tag).
// It fails if the group is broken. Called with t.mu held.
func (t *team) takeLocked(src, dst, tag int) (*recvReq, error) {
	if t.err != nil {
		return nil, t.err
	}
	req := t.posted[dst]
	if req == nil || req.src != src || req.tag != tag {
		return nil, nil
	}
	t.posted[dst] = nil
	req.claimed = true
	return req, nil
}

// fill copies buf into a claimed request (if any) and completes it; a
// mismatch of dtype or length fails both sides.
func fill(req *recvReq, buf comm.Buf, err error) error {
	if req == nil || err != nil {
		return err
	}
	err = comm.CheckMatch(req.buf, buf.DType(), buf.Len())
	if err == nil {
		copyBuf(req.buf, buf)
	}
	req.done <- err
	return err
}

func cloneBuf(b comm.Buf) comm.Buf {
	if b.DType() == tensor.BF16 {
		return comm.BF16(append([]tensor.BF16Bits(nil), b.BFloat16s()...))
	}
	return comm.F32(append([]float32(nil), b.Float32s()...))
}

// recv takes the oldest message from peer with tag, or posts a request and
// waits for one until the timeout or the group breaks. A message sent before
// the group broke is still delivered.
func (g *group) recv(buf comm.Buf, peer, tag int) error {
	t := g.t
	k := mailKey{peer, g.rank, tag}
	t.mu.Lock()
	if q := t.mail[k]; len(q) > 0 {
		msg := q[0]
		q[0] = comm.Buf{}
		if len(q) == 1 {
			delete(t.mail, k)
		} else {
			t.mail[k] = q[1:]
		}
		t.mu.Unlock()
		if err := comm.CheckMatch(buf, msg.DType(), msg.Len()); err != nil {
			return err
		}
		copyBuf(buf, msg)
		return nil
	}
	if t.err != nil {
		t.mu.Unlock()
		return t.err
	}
	req := &recvReq{src: peer, tag: tag, buf: buf, done: make(chan error, 1)}
	t.posted[g.rank] = req
	t.mu.Unlock()

	timeout := g.w.cfg.Timeout
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case err := <-req.done:
		return err
	case <-t.broken:
	case <-timer.C:
	}
	t.mu.Lock()
	if req.claimed { // a sender is copying: its outcome decides
		t.mu.Unlock()
		return <-req.done
	}
	t.posted[g.rank] = nil
	if t.err == nil {
		t.breakLocked(&comm.PeerError{Rank: t.ranks[peer], Op: "recv",
			Err: fmt.Errorf("%w: waited %v for a message with tag %d", comm.ErrTimeout, timeout, tag)})
	}
	err := t.err
	t.mu.Unlock()
	return err
}
