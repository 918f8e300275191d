package shm

import (
	"sync"

	"trellis/comm"
)

// outbox is this member's queue of sends to one peer, written to the ring
// in issue order by one pump goroutine while any wait for ring space.
type outbox struct {
	mu     sync.Mutex
	queue  []*sendReq
	active bool
}

type sendReq struct {
	h      header
	data   []byte
	finish func(error)
}

// Send copies the message into the ring to peer and completes; when the
// ring has no room for all of it, the rest is written by a goroutine as
// the receiver's drainer frees space (the receiver always drains, into the
// posted receive or its mailbox, so a Send never waits for its Recv).
func (g *group) Send(b comm.Buf, peer, tag int) comm.Work {
	if err := comm.CheckP2P("send", peer, tag, g.Size()); err != nil {
		return argErr(err)
	}
	w, finish, err := g.q.Start(b.Bytes())
	if err != nil {
		return comm.Done(err)
	}
	done := func(err error) { finish(g.ownErr(err)) }
	if err := g.broken(); err != nil {
		done(err)
		return w
	}
	if peer == g.me {
		done(g.in.deliverSelf(g, b, tag))
		return w
	}
	r := &sendReq{h: headerOf(b, tag), data: bytesOf(b), finish: done}
	ob := &g.out[peer]
	ob.mu.Lock()
	if !ob.active && g.ring(g.me, peer).free() >= uint64(hdrBytes+padded(len(r.data))) {
		g.write(peer, r, nil)
		ob.mu.Unlock()
		done(nil)
		return w
	}
	ob.queue = append(ob.queue, r)
	if !ob.active {
		ob.active = true
		g.w.p2p.Add(1)
		go g.pump(peer)
	}
	ob.mu.Unlock()
	return w
}

// pump writes the queued sends to peer, one at a time, in order.
func (g *group) pump(peer int) {
	defer g.w.p2p.Done()
	ob := &g.out[peer]
	for {
		ob.mu.Lock()
		if len(ob.queue) == 0 {
			ob.active = false
			ob.mu.Unlock()
			return
		}
		r := ob.queue[0]
		ob.queue[0] = nil
		ob.queue = ob.queue[1:]
		ob.mu.Unlock()
		r.finish(g.write(peer, r, func(need uint64) error {
			rg := g.ring(g.me, peer)
			return g.await(rg.tailEv(), peer, "send", func() bool { return rg.free() >= need })
		}))
	}
}

// write streams r into the ring to peer: the header once 32 bytes are
// free, then the payload as space frees up (wait blocks until at least
// need bytes are free; nil when the whole message is known to fit). Each
// piece is published by moving head and ringing the peer's doorbell.
func (g *group) write(peer int, r *sendReq, wait func(need uint64) error) error {
	rg := g.ring(g.me, peer)
	bell := g.w.seg.m.event(g.w.seg.l.member(g.ranks[peer]) + mBell)
	if wait != nil {
		if err := wait(hdrBytes); err != nil {
			return err
		}
	}
	head := rg.head().Load()
	var h [hdrBytes]byte
	r.h.put(h[:])
	rg.put(head, h[:])
	head += hdrBytes
	data, left := r.data, uint64(padded(len(r.data)))
	for left > 0 {
		free := rg.cap - (head - rg.tail().Load())
		if free == 0 { // only on the pump's path: the fast path checked the room
			rg.head().Store(head)
			bell.bump()
			if err := wait(1); err != nil {
				return err
			}
			continue
		}
		n := min(free, left, 256<<10)
		if d := min(int(n), len(data)); d > 0 {
			rg.put(head, data[:d])
			data = data[d:]
		}
		head, left = head+n, left-n
		rg.head().Store(head)
		bell.bump()
	}
	rg.head().Store(head)
	bell.bump()
	return nil
}

// failAll fails the sends still queued.
func (ob *outbox) failAll(err error) {
	ob.mu.Lock()
	q := ob.queue
	ob.queue = nil
	ob.mu.Unlock()
	for _, r := range q {
		r.finish(err)
	}
}
