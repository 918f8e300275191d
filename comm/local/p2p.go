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

// recvReq is a posted Recv waiting for its message. Whoever settles it —
// the sender that claims it, its timeout, or the group breaking — sets
// claimed under team.mu and then calls finish, once. Where receivers poll
// (Config.Poll > 0) the Recv's Work completes on the settling goroutine,
// so a polling receiver sees it at once and waits for no goroutine to be
// scheduled (that hand-off cost the ring attention 30–40 µs a receive on
// two busy cores); elsewhere on a goroutine of its own (parked).
type recvReq struct {
	buf     comm.Buf
	finish  func(err error, sent time.Time) // completes the Recv's Work
	claimed bool                            // settled (guarded by team.mu)
	timer   *time.Timer                     // the Recv's timeout
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
		t.mu.Unlock()
		return g.fill(req, buf, due, time.Now())
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

// fill copies buf into a request the sender claimed and completes it at
// due (link emulation; at once without), reporting sent as the peer's
// arrival; a mismatch of dtype or length fails both sides.
func (g *group) fill(req *recvReq, buf comm.Buf, due, sent time.Time) error {
	req.timer.Stop()
	err := comm.CheckMatch(req.buf, buf.DType(), buf.Len())
	if err == nil {
		copyBuf(req.buf, buf)
	}
	g.finishAt(due, func(err error) { req.finish(err, sent) }, err)
	return err
}

// newBuf allocates a buffer of b's dtype and length.
func newBuf(b comm.Buf) comm.Buf {
	if b.DType() == tensor.BF16 {
		return comm.BF16(make([]tensor.BF16Bits, b.Len()))
	}
	return comm.F32(make([]float32, b.Len()))
}

// Recv issues a receive: the oldest buffered message from peer with tag,
// or a posted request that its sender completes (recvReq), failed at the
// timeout or when the group breaks. A message sent before the group broke
// is still delivered. Under link emulation the Recv completes once its
// message has arrived (its due time).
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
	req := &recvReq{buf: buf, finish: func(err error, sent time.Time) { finishFrom(g.p2pErr(err), sent) }}
	if g.w.cfg.Poll == 0 {
		req.finish = parked(req.finish)
	}
	req.timer = time.AfterFunc(g.w.cfg.Timeout, func() { g.expire(req, k) })
	t.posted[k] = append(t.posted[k], req)
	t.mu.Unlock()
	return w
}

// parked returns finish run on a goroutine started now and parked until
// the returned function is called. Where the receivers do not poll
// (Config.Poll = 0: ranks outnumber the cores) a posted Recv completes
// this way, not on its settling goroutine: a pipeline of 4 ranks on 2
// cores measured its bubble 3.7 ms a step this way against 4.45 ms
// completing on the sender (docs/BENCHMARKS.md, "Waits that poll";
// Go starts a goroutine on its creator's core and may wake an idle core
// to take work, which a plain wake-up from the sender does not).
func parked(finish func(err error, sent time.Time)) func(err error, sent time.Time) {
	type outcome struct {
		err  error
		sent time.Time
	}
	ch := make(chan outcome, 1)
	go func() {
		o := <-ch
		finish(o.err, o.sent)
	}()
	return func(err error, sent time.Time) { ch <- outcome{err, sent} }
}

// expire settles a posted Recv whose timeout passed without a message:
// it withdraws the request and breaks the group naming the silent sender.
func (g *group) expire(req *recvReq, k mailKey) {
	t := g.t
	t.mu.Lock()
	if req.claimed { // a sender took it first
		t.mu.Unlock()
		return
	}
	req.claimed = true
	t.withdraw(k, req)
	if t.err == nil {
		t.breakLocked(&comm.PeerError{Rank: t.ranks[k.src], Op: "recv",
			Err: fmt.Errorf("%w: waited %v for a message with tag %d", comm.ErrTimeout, g.w.cfg.Timeout, k.tag)})
	}
	err := t.err
	t.mu.Unlock()
	req.finish(err, time.Time{})
}

// failPosted settles every posted Recv no sender has claimed with the
// error that broke the group (called once, after it broke).
func (t *team) failPosted() {
	t.mu.Lock()
	var reqs []*recvReq
	for k, q := range t.posted {
		for _, r := range q {
			if !r.claimed {
				r.claimed = true
				r.timer.Stop()
				reqs = append(reqs, r)
			}
		}
		delete(t.posted, k)
	}
	err := t.err
	t.mu.Unlock()
	for _, r := range reqs {
		r.finish(err, time.Time{})
	}
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
