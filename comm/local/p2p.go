package local

import (
	"fmt"
	"time"

	"trellis/comm"
	"trellis/tensor"
)

// Point-to-point. Send and Recv run outside the group's queue (comm's
// package documentation): each is matched the moment it is issued. A Send
// whose Recv is posted copies straight into the receiver's buffer;
// otherwise it copies the payload into the receiver's mailbox, within the
// bound Config.MaxBuffered on the bytes a member holds, and completes. A
// Recv takes the oldest mailbox message of its (peer, tag) or posts itself;
// posted Recvs of one (peer, tag) are served first in, first out.

// mailKey identifies a message stream: messages from src to dst with tag
// arrive in the order sent.
type mailKey struct{ src, dst, tag int }

// recvReq is a posted Recv waiting for its message.
type recvReq struct {
	buf     comm.Buf
	done    chan error // receives the outcome once a sender has copied
	claimed bool       // a sender took the request (guarded by team.mu)
}

// Send issues a send. With link emulation the transfer time passes first,
// on a goroutine; sends to one peer are delivered in issue order.
func (g *group) Send(buf comm.Buf, peer, tag int) comm.Work {
	if err := comm.CheckP2P("send", peer, tag, g.Size()); err != nil {
		return comm.Done(err)
	}
	w, finish, err := g.q.Start(buf.Bytes())
	if err != nil {
		return comm.Done(err)
	}
	m := g.w.cfg.Link
	if m == nil {
		finish(g.p2pErr(g.deliver(buf, peer, tag)))
		return w
	}
	bytes := int64(buf.Bytes())
	d := m.Cost(g.t.ranks[g.rank], g.t.ranks, func(q int) (int64, int64, bool) { return bytes, 0, q == peer })
	g.mu.Lock()
	prev := g.lastSend[peer]
	now := make(chan struct{})
	g.lastSend[peer] = now
	g.mu.Unlock()
	go func() {
		defer close(now)
		if prev != nil {
			<-prev
		}
		g.t.waitOrBreak(time.Now().Add(d))
		finish(g.p2pErr(g.deliver(buf, peer, tag)))
	}()
	return w
}

// deliver hands buf to member peer: into its posted Recv, or its mailbox.
func (g *group) deliver(buf comm.Buf, peer, tag int) error {
	t := g.t
	k := mailKey{g.rank, peer, tag}
	t.mu.Lock()
	if t.err != nil {
		err := t.err
		t.mu.Unlock()
		return err
	}
	if q := t.posted[k]; len(q) > 0 {
		req := q[0]
		t.popPosted(k)
		req.claimed = true
		t.mu.Unlock()
		return fill(req, buf)
	}
	n := int64(buf.Bytes())
	if limit := g.w.cfg.MaxBuffered; t.held[peer]+n > limit {
		t.breakLocked(&comm.PeerError{Rank: t.ranks[g.rank], Op: "send", Err: fmt.Errorf(
			"%w: world rank %d sent %d bytes with tag %d to world rank %d, which already holds %d bytes of messages it has not received (MaxBuffered=%d)",
			comm.ErrBufferFull, t.ranks[g.rank], n, tag, t.ranks[peer], t.held[peer], limit)})
		err := t.err
		t.mu.Unlock()
		return err
	}
	t.held[peer] += n
	t.mail[k] = append(t.mail[k], cloneBuf(buf))
	t.mu.Unlock()
	return nil
}

// popPosted removes the oldest posted Recv of k. Called with t.mu held.
func (t *team) popPosted(k mailKey) {
	q := t.posted[k]
	q[0] = nil
	if len(q) == 1 {
		delete(t.posted, k)
	} else {
		t.posted[k] = q[1:]
	}
}

// fill copies buf into a claimed request and completes it; a mismatch of
// dtype or length fails both sides.
func fill(req *recvReq, buf comm.Buf) error {
	err := comm.CheckMatch(req.buf, buf.DType(), buf.Len())
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

// Recv issues a receive: the oldest buffered message from peer with tag, or
// a posted request that a goroutine waits on until the timeout or the group
// breaks. A message sent before the group broke is still delivered.
func (g *group) Recv(buf comm.Buf, peer, tag int) comm.Work {
	if err := comm.CheckP2P("recv", peer, tag, g.Size()); err != nil {
		return comm.Done(err)
	}
	w, finish, err := g.q.Start(buf.Bytes())
	if err != nil {
		return comm.Done(err)
	}
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
		t.held[g.rank] -= int64(msg.Bytes())
		t.mu.Unlock()
		err := comm.CheckMatch(buf, msg.DType(), msg.Len())
		if err == nil {
			copyBuf(buf, msg)
		}
		finish(g.p2pErr(err))
		return w
	}
	if t.err != nil {
		err := t.err
		t.mu.Unlock()
		finish(g.p2pErr(err))
		return w
	}
	req := &recvReq{buf: buf, done: make(chan error, 1)}
	t.posted[k] = append(t.posted[k], req)
	t.mu.Unlock()
	go func() { finish(g.p2pErr(g.await(req, k))) }()
	return w
}

// await waits for a posted Recv. Past the timeout it withdraws the request
// and breaks the group naming the silent sender.
func (g *group) await(req *recvReq, k mailKey) error {
	t := g.t
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
	t.withdraw(k, req)
	if t.err == nil {
		t.breakLocked(&comm.PeerError{Rank: t.ranks[k.src], Op: "recv",
			Err: fmt.Errorf("%w: waited %v for a message with tag %d", comm.ErrTimeout, timeout, k.tag)})
	}
	err := t.err
	t.mu.Unlock()
	return err
}

// withdraw removes a posted request. Called with t.mu held.
func (t *team) withdraw(k mailKey, req *recvReq) {
	q := t.posted[k]
	for i, r := range q {
		if r == req {
			q = append(q[:i:i], q[i+1:]...)
			break
		}
	}
	if len(q) == 0 {
		delete(t.posted, k)
	} else {
		t.posted[k] = q
	}
}

// p2pErr reports ErrClosed for an operation of a group this rank closed.
func (g *group) p2pErr(err error) error {
	if err != nil && g.isClosed() {
		return comm.ErrClosed
	}
	return err
}
