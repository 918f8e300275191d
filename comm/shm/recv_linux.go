package shm

import (
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"trellis/comm"
)

// inbox is what this member has received on a group: the posted receives,
// the mailbox of messages that arrived before their receive, and the
// message being read from each peer's ring. The drainer fills it; Recv
// takes from it; both under mu. Messages with one (peer, tag) are matched
// first in, first out: each ring delivers in order, and a message goes to
// the oldest posted receive of its key or, if none, to the back of the
// mailbox, where the next receive of the key takes the oldest.
type inbox struct {
	mu     sync.Mutex
	cur    []*incoming // by peer
	posted map[key][]*recvReq
	mail   map[key][]*message
	held   int64 // bytes of mailbox messages not yet taken by a receive
}

type key struct {
	src int
	tag uint64
}

type recvReq struct {
	buf      comm.Buf
	src      int
	tag      uint64
	deadline time.Time
	finish   func(error)
	done     bool
}

func (r *recvReq) complete(err error) {
	if !r.done {
		r.done = true
		r.finish(err)
	}
}

type message struct {
	h        header
	data     []byte
	complete bool
	waiter   *recvReq // a receive that took it while it was still arriving
}

// incoming is a message being read from a ring: into a posted receive's
// buffer, a mailbox buffer, or nowhere (a mismatched receive; a group
// already broken).
type incoming struct {
	h     header
	total int // ring bytes of the payload (padded)
	got   int
	dst   []byte
	req   *recvReq
	msg   *message
}

func (in *inbox) init(p int) {
	in.cur = make([]*incoming, p)
	in.posted = map[key][]*recvReq{}
	in.mail = map[key][]*message{}
}

func (in *inbox) heldBytes() int64 {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.held
}

// Recv takes the oldest mailbox message of (peer, tag), or posts a
// receive that the drainer fills when the message arrives; past the
// Timeout, or when peer dies, it fails naming peer. A message that arrived
// before the group broke is still delivered.
func (g *group) Recv(b comm.Buf, peer, tag int) comm.Work {
	if err := comm.CheckP2P("recv", peer, tag, g.Size()); err != nil {
		return argErr(err)
	}
	w, finish, err := g.q.Start(b.Bytes())
	if err != nil {
		return comm.Done(err)
	}
	req := &recvReq{buf: b, src: peer, tag: uint64(tag), deadline: time.Now().Add(g.w.cfg.Timeout),
		finish: func(err error) { finish(g.ownErr(err)) }}
	in := &g.in
	k := key{peer, uint64(tag)}
	in.mu.Lock()
	if ms := in.mail[k]; len(ms) > 0 {
		msg := ms[0]
		in.popMail(k)
		if !msg.complete {
			msg.waiter = req
			in.mu.Unlock()
			return w
		}
		in.held -= int64(msg.h.bytes)
		in.mu.Unlock()
		req.complete(take(req, msg))
		return w
	}
	if err := g.broken(); err != nil {
		in.mu.Unlock()
		req.complete(err)
		return w
	}
	in.posted[k] = append(in.posted[k], req)
	in.mu.Unlock()
	g.w.bell.bump() // the drainer now watches this receive's sender
	return w
}

// take copies a complete message into a receive.
func take(req *recvReq, msg *message) error {
	if err := comm.CheckMatch(req.buf, msg.h.dt, msg.h.n); err != nil {
		return fmt.Errorf("shm: %w", err)
	}
	copy(bytesOf(req.buf), msg.data)
	return nil
}

func (in *inbox) popMail(k key) {
	ms := in.mail[k]
	ms[0] = nil
	if len(ms) == 1 {
		delete(in.mail, k)
	} else {
		in.mail[k] = ms[1:]
	}
}

func (in *inbox) popPosted(k key) *recvReq {
	rs := in.posted[k]
	r := rs[0]
	rs[0] = nil
	if len(rs) == 1 {
		delete(in.posted, k)
	} else {
		in.posted[k] = rs[1:]
	}
	return r
}

// poll moves whatever has arrived in this member's rings, then checks the
// posted receives' senders and deadlines. It reports whether it moved
// anything, whether receives are waiting, and the error of a message the
// mailbox could not hold (comm.ErrBufferFull: the group is broken).
func (in *inbox) poll(g *group) (moved, waiting bool, err error) {
	if g.isClosed() {
		return false, false, nil
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	for src := range in.cur {
		if src != g.me {
			m, e := in.pollRing(g, src)
			moved = moved || m
			if e != nil && err == nil {
				err = e
			}
		}
	}
	waiting = len(in.posted) > 0
	for _, c := range in.cur {
		waiting = waiting || c != nil && (c.req != nil || c.msg != nil && c.msg.waiter != nil)
	}
	if waiting {
		in.checkWaiting(g)
	}
	return moved, waiting, err
}

// pollErr drains the rings at the end of a collective, so that a message
// sent before a peer entered the collective is accounted (and bounded)
// by the time it completes here: it returns comm.ErrBufferFull's break
// whether this poll or the drainer found it. (Other breaks do not fail a
// collective that has everything it needs.)
func (in *inbox) pollErr(g *group) error {
	if _, _, err := in.poll(g); err != nil {
		return err
	}
	if err := g.broken(); errors.Is(err, comm.ErrBufferFull) {
		return err
	}
	return nil
}

// pollRing reads what is in src's ring. Called with mu held.
func (in *inbox) pollRing(g *group, src int) (bool, error) {
	rg := g.ring(src, g.me)
	head, tail := rg.head().Load(), rg.tail().Load()
	if head == tail {
		return false, nil
	}
	var err error
	for tail < head {
		c := in.cur[src]
		if c == nil {
			var hb [hdrBytes]byte
			rg.get(tail, hb[:])
			tail += hdrBytes
			c, err = in.start(g, src, parseHeader(hb[:]))
			in.cur[src] = c
		}
		k := min(int(head-tail), c.total-c.got, 256<<10)
		if c.dst != nil && c.got < len(c.dst) {
			rg.get(tail, c.dst[c.got:min(c.got+k, len(c.dst))])
		}
		c.got += k
		tail += uint64(k)
		if c.got == c.total {
			in.finish(c)
			in.cur[src] = nil
		}
		rg.tail().Store(tail)
		rg.tailEv().bump()
	}
	return true, err
}

// start routes a message whose header has arrived: into the oldest posted
// receive of its key, else into a new mailbox message, within MaxBuffered.
func (in *inbox) start(g *group, src int, h header) (*incoming, error) {
	c := &incoming{h: h, total: padded(h.bytes)}
	k := key{src, h.tag}
	if len(in.posted[k]) > 0 {
		req := in.popPosted(k)
		if err := comm.CheckMatch(req.buf, h.dt, h.n); err != nil {
			req.complete(fmt.Errorf("shm: %w", err)) // the payload is discarded
			return c, nil
		}
		c.req, c.dst = req, bytesOf(req.buf)
		return c, nil
	}
	if limit := g.w.cfg.MaxBuffered; in.held+int64(h.bytes) > limit {
		err := g.fail(kindBufferFull, src, "send", fmt.Sprintf(
			"world rank %d sent %d bytes with tag %d to world rank %d, which already holds %d bytes of messages it has not received (MaxBuffered=%d)",
			g.worldRank(src), h.bytes, h.tag, g.worldRank(g.me), in.held, limit))
		return c, err
	}
	msg := &message{h: h, data: alignedBytes(h.bytes)}
	in.held += int64(h.bytes)
	in.mail[k] = append(in.mail[k], msg)
	c.msg, c.dst = msg, msg.data
	return c, nil
}

// finish completes an incoming message. Called with mu held.
func (in *inbox) finish(c *incoming) {
	switch {
	case c.req != nil:
		c.req.complete(nil)
	case c.msg != nil:
		c.msg.complete = true
		if r := c.msg.waiter; r != nil {
			in.held -= int64(c.msg.h.bytes)
			r.complete(take(r, c.msg))
		}
	}
}

// checkWaiting fails the receives whose group broke, whose sender died or
// whose deadline passed. Called with mu held.
func (in *inbox) checkWaiting(g *group) {
	err := g.broken()
	now := time.Now()
	for k, rs := range in.posted {
		if err == nil {
			if e := g.w.alive(g.ranks[k.src]); e != nil {
				err = g.fail(kindDied, k.src, "recv", e.Error())
			} else if now.After(rs[0].deadline) {
				err = g.fail(kindTimeout, k.src, "recv", fmt.Sprintf("waited %v for a message with tag %d", g.w.cfg.Timeout, k.tag))
			}
		}
	}
	for src, c := range in.cur {
		if c != nil && err == nil && (c.req != nil || c.msg != nil && c.msg.waiter != nil) {
			if e := g.w.alive(g.ranks[src]); e != nil {
				err = g.fail(kindDied, src, "recv", e.Error())
			}
		}
	}
	if err != nil {
		in.failLocked(err)
	}
}

// failAll fails every receive still waiting (Close).
func (in *inbox) failAll(g *group, err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.failLocked(err)
}

func (in *inbox) failLocked(err error) {
	for k, rs := range in.posted {
		for _, r := range rs {
			r.complete(err)
		}
		delete(in.posted, k)
	}
	for src, c := range in.cur {
		if c == nil {
			continue
		}
		if c.req != nil {
			c.req.complete(err)
			c.req, c.dst = nil, nil
		}
		if c.msg != nil && c.msg.waiter != nil {
			c.msg.waiter.complete(err)
			c.msg.waiter = nil
		}
		in.cur[src] = c
	}
}

// deliverSelf is a send to this member itself: into its posted receive or
// its mailbox.
func (in *inbox) deliverSelf(g *group, b comm.Buf, tag int) error {
	h := headerOf(b, tag)
	in.mu.Lock()
	defer in.mu.Unlock()
	c, err := in.start(g, g.me, h)
	if err != nil {
		return err
	}
	if c.dst != nil {
		copy(c.dst, bytesOf(b))
	}
	in.finish(c)
	return nil
}

// alignedBytes allocates n bytes aligned for float32 views.
func alignedBytes(n int) []byte {
	w := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), len(w)*8)[:n]
}
