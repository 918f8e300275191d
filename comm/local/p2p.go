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
// posted Recvs of one (peer, tag) are served first in, first out. A posted
// Recv reports when its sender delivered (comm.Queue.StartFrom), so that
// its Wait tells the wait for a peer still computing (Stats.Skew) from
// the transfer's.

// mailKey identifies a message stream: messages from src to dst with tag
// arrive in the order sent.
type mailKey struct{ src, dst, tag int }

// recvReq is a posted Recv waiting for its message.
type recvReq struct {
	buf     comm.Buf
	done    chan error // receives the outcome once a sender has copied
	claimed bool       // a sender took the request (guarded by team.mu)
	due     time.Time  // link emulation: when the message arrives (set before done)
	sent    time.Time  // when the sender delivered (set before done): the peer's arrival
}

// message is a mailbox entry: a copy of the payload and when it arrives
// (zero without link emulation).
type message struct {
	buf comm.Buf
	due time.Time
}

// Send issues a send: the payload is copied now, into the receiver's
// posted Recv or its mailbox, so a send never waits for its receiver or for
// a goroutine to be scheduled. With link emulation the message is stamped
// with its arrival time (arrival), and the Send and its Recv complete no
// earlier than that: the link delays delivery, not the sender.
func (g *group) Send(buf comm.Buf, peer, tag int) comm.Work {
	if err := comm.CheckP2P("send", peer, tag, g.Size()); err != nil {
		return comm.Done(err)
	}
	w, finish, err := g.q.Start(buf.Bytes())
	if err != nil {
		return comm.Done(err)
	}
	due := g.arrival(int64(buf.Bytes()), peer)
	g.finishAt(due, finish, g.p2pErr(g.deliver(buf, peer, tag, due)))
	return w
}

// arrival is when a message of n bytes sent now to member peer arrives
// under link emulation (the zero time without): it leaves once the
// messages sent before it to peer have left, occupies the link for
// n/bandwidth and arrives one latency later —
//
//	leave = max(now, free);  free = leave + n/B;  arrive = free + L
//
// so messages to one peer share its bandwidth and their latencies overlap
// (with LinkModel.SharedPorts, messages to that world rank on every group).
func (g *group) arrival(n int64, peer int) time.Time {
	m := g.w.cfg.Link
	if m == nil {
		return time.Time{}
	}
	from, to := g.t.ranks[g.rank], g.t.ranks[peer]
	l := m.between(from, to)
	now := time.Now()
	mu, get, set := &g.mu, func() time.Time { return g.linkFree[peer] }, func(t time.Time) { g.linkFree[peer] = t }
	if m.SharedPorts { // every group's messages from this world rank to that one
		key := [2]int{from, to}
		mu, get, set = &g.w.portMu, func() time.Time { return g.w.ports[key] }, func(t time.Time) { g.w.ports[key] = t }
	}
	mu.Lock()
	defer mu.Unlock()
	leave := get()
	if leave.Before(now) {
		leave = now
	}
	free := leave.Add(l.occupancy(n))
	set(free)
	return free.Add(l.Latency)
}

// finishAt finishes a started operation with err at due: at once when due
// has passed (or err is set), else on a goroutine that sleeps until due
// (sleepUntil: to the microsecond, not the Go timer's millisecond) or
// until the group breaks.
func (g *group) finishAt(due time.Time, finish func(error), err error) {
	if err != nil || !time.Now().Before(due) {
		finish(err)
		return
	}
	go func() {
		sleepUntil(due, g.t.broken)
		finish(err)
	}()
}

// deliver hands buf to member peer, arriving at due: into its posted Recv,
// or its mailbox.
func (g *group) deliver(buf comm.Buf, peer, tag int, due time.Time) error {
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
		req.due, req.sent = due, time.Now()
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
	c := t.takeSpare(peer, buf)
	copyBuf(c, buf)
	t.mail[k] = append(t.mail[k], message{buf: c, due: due})
	t.mu.Unlock()
	return nil
}

// takeSpare removes and returns a spare buffer of member dst with buf's
// dtype and length, or allocates one. Called with t.mu held. Reusing the
// buffers of received messages keeps a stream of early messages (a
// pipeline's activations sent before their receive is posted) from
// allocating, and faulting in, fresh memory for every message.
func (t *team) takeSpare(dst int, buf comm.Buf) comm.Buf {
	sp := t.spare[dst]
	for i, b := range sp {
		if b.DType() == buf.DType() && b.Len() == buf.Len() {
			sp[i] = sp[len(sp)-1]
			sp[len(sp)-1] = comm.Buf{}
			t.spare[dst] = sp[:len(sp)-1]
			t.spared[dst] -= int64(b.Bytes())
			return b
		}
	}
	return newBuf(buf)
}

// putSpare keeps buf, a received message's buffer of member dst, for
// reuse, within the bound MaxBuffered on dst's spares.
func (t *team) putSpare(dst int, buf comm.Buf, limit int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := int64(buf.Bytes()); t.spared[dst]+n <= limit {
		t.spare[dst] = append(t.spare[dst], buf)
		t.spared[dst] += n
	}
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

// newBuf allocates a buffer of b's dtype and length.
func newBuf(b comm.Buf) comm.Buf {
	if b.DType() == tensor.BF16 {
		return comm.BF16(make([]tensor.BF16Bits, b.Len()))
	}
	return comm.F32(make([]float32, b.Len()))
}

// Recv issues a receive: the oldest buffered message from peer with tag, or
// a posted request that a goroutine waits on until the timeout or the group
// breaks. A message sent before the group broke is still delivered. Under
// link emulation the Recv completes once its message has arrived (its due
// time).
func (g *group) Recv(buf comm.Buf, peer, tag int) comm.Work {
	if err := comm.CheckP2P("recv", peer, tag, g.Size()); err != nil {
		return comm.Done(err)
	}
	w, finishFrom, err := g.q.StartFrom(buf.Bytes())
	if err != nil {
		return comm.Done(err)
	}
	finish := func(err error) { finishFrom(err, time.Time{}) }
	t := g.t
	k := mailKey{peer, g.rank, tag}
	t.mu.Lock()
	if q := t.mail[k]; len(q) > 0 {
		msg := q[0]
		q[0] = message{}
		if len(q) == 1 {
			delete(t.mail, k)
		} else {
			t.mail[k] = q[1:]
		}
		t.held[g.rank] -= int64(msg.buf.Bytes())
		t.mu.Unlock()
		err := comm.CheckMatch(buf, msg.buf.DType(), msg.buf.Len())
		if err == nil {
			copyBuf(buf, msg.buf)
		}
		t.putSpare(g.rank, msg.buf, g.w.cfg.MaxBuffered)
		g.finishAt(msg.due, finish, g.p2pErr(err))
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
	go func() {
		err := g.await(req, k)
		if err == nil {
			sleepUntil(req.due, t.broken)
		}
		// The wait before the sender delivered was for the peer (Skew);
		// the rest, the link's delay and this goroutine's wake-up, the
		// transfer's.
		finishFrom(g.p2pErr(err), req.sent)
	}()
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
