//go:build mpi

package mpi

// #include "tmpi.h"
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"time"

	"trellis/comm"
	"trellis/tensor"
)

// key selects messages: the sender (group rank) and the user tag.
type key struct{ peer, tag int }

// posted is a Recv not yet matched with a message.
type posted struct {
	buf      comm.Buf
	finish   func(error)
	deadline time.Time
}

// arrived is a message received (or being received) before its Recv.
type arrived struct {
	dtype   tensor.DType
	n       int // elements
	data    []byte
	done    bool    // the data is all here
	waiting *posted // a Recv matched while the data was still arriving
}

// inflight is an MPI request the progress goroutine tests.
type inflight struct {
	req      *request
	pin      *runtime.Pinner
	deadline time.Time
	peer     int
	op       string
	onDone   func(error) // called once, with nil, an MPI error or a timeout
}

// matcher is the point-to-point state of a group, under mu.
type matcher struct {
	mu       sync.Mutex
	posted   map[key][]*posted
	arrived  map[key][]*arrived
	reqs     []*inflight
	buffered int64
}

func (m *matcher) init() {
	m.posted = map[key][]*posted{}
	m.arrived = map[key][]*arrived{}
}

func (m *matcher) bufferedBytes() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.buffered
}

// failAll fails every posted Recv (the group closed or broke).
func (m *matcher) failAll(err error) {
	m.mu.Lock()
	ps := m.posted
	m.posted = map[key][]*posted{}
	m.mu.Unlock()
	for _, l := range ps {
		for _, p := range l {
			p.finish(err)
		}
	}
}

// abandon fails every request still in flight with err, keeping its memory
// pinned for good (MPI may still use it): the group is closing and its
// progress goroutine has stopped.
func (m *matcher) abandon(g *group, err error) {
	m.mu.Lock()
	rs := m.reqs
	m.reqs = nil
	m.mu.Unlock()
	for _, r := range rs {
		g.leak(r.pin)
		r.onDone(err)
	}
}

// mpiTag carries the user tag and the dtype.
func mpiTag(tag int, d tensor.DType) int {
	t := 2 * tag
	if d == tensor.BF16 {
		t++
	}
	return t
}

func (g *group) checkP2P(op string, buf comm.Buf, peer, tag int) error {
	if err := comm.CheckP2P(op, peer, tag, g.size); err != nil {
		return err
	}
	if 2*tag+1 > g.tagUB {
		return fmt.Errorf("%w: %s: tag %d exceeds MPI_TAG_UB/2 = %d", comm.ErrArgs, op, tag, g.tagUB/2)
	}
	return checkCount(op, buf.Bytes())
}

// Send posts an MPI_Isend; it completes once MPI no longer needs buf.
func (g *group) Send(buf comm.Buf, peer, tag int) comm.Work {
	if err := g.checkP2P("send", buf, peer, tag); err != nil {
		return comm.Done(err)
	}
	w, finish, err := g.q.Start(buf.Bytes())
	if err != nil {
		return comm.Done(err)
	}
	b := bytesOf(buf)
	pin, req := pinned(b), new(request)
	if err := mpiErr("MPI_Isend", C.t_isend(ptr(b), C.int(len(b)), C.int(peer), C.int(mpiTag(tag, buf.DType())), g.pc, req)); err != nil {
		pin.Unpin()
		finish(err)
		return w
	}
	g.p2p.mu.Lock()
	g.p2p.reqs = append(g.p2p.reqs, &inflight{req: req, pin: pin, deadline: time.Now().Add(g.cfg.Timeout),
		peer: peer, op: "send", onDone: finish})
	g.p2p.mu.Unlock()
	return w
}

// Recv takes the oldest buffered message for (peer, tag), or posts itself
// for the progress goroutine to match.
func (g *group) Recv(buf comm.Buf, peer, tag int) comm.Work {
	if err := g.checkP2P("recv", buf, peer, tag); err != nil {
		return comm.Done(err)
	}
	w, finish, err := g.q.Start(buf.Bytes())
	if err != nil {
		return comm.Done(err)
	}
	k := key{peer, tag}
	p := &posted{buf: buf, finish: finish, deadline: time.Now().Add(g.cfg.Timeout)}
	m := &g.p2p
	m.mu.Lock()
	if l := m.arrived[k]; len(l) > 0 {
		a := l[0]
		m.arrived[k] = l[1:]
		m.buffered -= int64(len(a.data))
		if a.done {
			m.mu.Unlock()
			deliver(p, a)
			return w
		}
		a.waiting = p
		m.mu.Unlock()
		return w
	}
	m.posted[k] = append(m.posted[k], p)
	m.mu.Unlock()
	return w
}

// deliver copies a buffered message into its Recv.
func deliver(p *posted, a *arrived) {
	if err := comm.CheckMatch(p.buf, a.dtype, a.n); err != nil {
		p.finish(err)
		return
	}
	copy(bytesOf(p.buf), a.data)
	p.finish(nil)
}

// progress matches arriving messages and tests requests until the group
// closes.
func (g *group) progress() {
	defer close(g.polled)
	var nap time.Duration
	for i := 0; ; i++ {
		select {
		case <-g.closed:
			return
		default:
		}
		if g.waiting.Load() > 0 {
			// A collective's waiter drains meanwhile (group.wait).
			select {
			case <-g.closed:
				return
			case <-g.resume:
			}
			i, nap = 0, 0
			continue
		}
		if g.p2p.drain(g) {
			i, nap = 0, 0
		}
		cap := 2 * time.Millisecond
		g.p2p.mu.Lock()
		if len(g.p2p.reqs) > 0 {
			cap = 200 * time.Microsecond
		}
		g.p2p.mu.Unlock()
		nap = backoff(i, nap, cap)
	}
}

// drain receives every message that has arrived, tests the requests in
// flight and expires posted receives; it reports whether anything happened.
func (m *matcher) drain(g *group) bool {
	select {
	case <-g.closed: // MPI may be finalized: no more calls into it
		return false
	default:
	}
	m.mu.Lock()
	var done []func()
	busy := m.probe(g, &done)
	busy = m.test(g, &done) || busy
	now := time.Now()
	for k, l := range m.posted {
		for len(l) > 0 && now.After(l[0].deadline) {
			p := l[0]
			l = l[1:]
			done = append(done, func() { p.finish(g.timeoutErr("recv", k.peer)) })
		}
		m.posted[k] = l
	}
	m.mu.Unlock()
	for _, f := range done {
		f()
	}
	return busy || len(done) > 0
}

// probe matches the messages that have arrived (under mu).
func (m *matcher) probe(g *group, done *[]func()) bool {
	busy := false
	for {
		var flag, src, tag, nbytes C.int
		if err := mpiErr("MPI_Iprobe", C.t_iprobe(g.pc, &flag, &src, &tag, &nbytes)); err != nil {
			g.q.Fail(err)
			return busy
		}
		if flag == 0 {
			return busy
		}
		busy = true
		d := tensor.F32
		if tag&1 == 1 {
			d = tensor.BF16
		}
		k := key{int(src), int(tag) >> 1}
		a := &arrived{dtype: d, n: int(nbytes) / d.Size(), data: make([]byte, int(nbytes))}
		target := a.data
		var into *posted
		if l := m.posted[k]; len(l) > 0 && g.q.Err() == nil {
			into = l[0]
			m.posted[k] = l[1:]
			if err := comm.CheckMatch(into.buf, d, a.n); err != nil {
				p := into
				*done = append(*done, func() { p.finish(err) })
				into = nil // drain the message and drop it
			} else {
				target = bytesOf(into.buf)
			}
		} else if g.q.Err() == nil {
			if m.buffered+int64(nbytes) > g.cfg.MaxBuffered {
				err := &comm.PeerError{Rank: g.global[k.peer], Op: "recv", Err: fmt.Errorf("%w: rank %d sent %d bytes with %d already buffered (MaxBuffered %d)",
					comm.ErrBufferFull, g.global[k.peer], int(nbytes), m.buffered, g.cfg.MaxBuffered)}
				g.q.Fail(err)
				*done = append(*done, func() { m.failAll(err) })
			} else {
				m.buffered += int64(nbytes)
				m.arrived[k] = append(m.arrived[k], a)
			}
		}
		pin, req := pinned(target), new(request)
		if err := mpiErr("MPI_Irecv", C.t_irecv(ptr(target), nbytes, src, tag, g.pc, req)); err != nil {
			pin.Unpin()
			g.q.Fail(err)
			return busy
		}
		m.reqs = append(m.reqs, &inflight{req: req, pin: pin, deadline: time.Now().Add(g.cfg.Timeout), peer: k.peer, op: "recv",
			onDone: func(err error) {
				if into != nil {
					into.finish(err)
					return
				}
				m.mu.Lock()
				a.done = true
				p := a.waiting
				m.mu.Unlock()
				if p != nil {
					if err != nil {
						p.finish(err)
					} else {
						deliver(p, a)
					}
				}
			}})
	}
}

// test polls the requests in flight (under mu); finished ones run their
// onDone after mu is released.
func (m *matcher) test(g *group, done *[]func()) bool {
	busy := false
	now := time.Now()
	keep := m.reqs[:0]
	for _, r := range m.reqs {
		ok, err := test(r.req)
		switch {
		case ok || err != nil:
			r.pin.Unpin()
		case now.After(r.deadline):
			g.leak(r.pin)
			err = g.timeoutErr(r.op, r.peer)
		default:
			keep = append(keep, r)
			continue
		}
		busy = true
		f := r.onDone
		*done = append(*done, func() { f(err) })
	}
	for i := len(keep); i < len(m.reqs); i++ {
		m.reqs[i] = nil
	}
	m.reqs = keep
	return busy
}
