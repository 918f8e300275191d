package tcp

import (
	"fmt"
	"sync"

	"trellis/comm"
)

// req is one frame's worth of transfer: a send to, or a receive from, one
// peer. Its done channel is signalled exactly once, with nil or the error,
// by whoever finishes it (a connection's reader or writer, a mailbox
// failing, a cancelled group) — so an operation that waits for all its reqs
// knows no goroutine will touch its buffers afterwards.
type req struct {
	peer int        // world rank
	done chan error // capacity 1

	// receive
	dst  []byte
	red  *reducer // nil: copy into dst
	last bool
	bf16 bool // the elements are bf16
	key  chanKey

	// send
	hdr     [headerSize]byte
	payload []byte
	ctrl    bool // abort or bye: survives a failed outbox

	waited bool
	err    error
}

func newReq(peer int) *req { return &req{peer: peer, done: make(chan error, 1)} }

// chanKey is one ordered message stream from a peer.
type chanKey struct{ group, tag uint64 }

// arrival is a frame that came before its receive was posted, buffered.
type arrival struct {
	data    []byte
	pooled  bool // data came from the framePool and goes back once used
	last    bool
	bf16    bool
	ready   bool  // data is complete (or err is set)
	err     error // the connection failed while reading it
	claimed *req  // a receive that took it while it was still arriving
}

type channel struct {
	posted  []*req
	arrived []*arrival
}

// mailbox matches the frames arriving from one peer with posted receives,
// first in first out per (group, tag). Frames nobody waits for yet are
// buffered, so a peer's sends never wait for this rank's receives, but only
// up to limit bytes: a frame beyond it is refused with comm.ErrBufferFull
// (the reader then fails the connection, naming the peer).
type mailbox struct {
	peer   int
	pool   *framePool
	limit  int64 // bound on held
	mu     sync.Mutex
	chans  map[chanKey]*channel
	err    error            // once set, receives that find no buffered frame fail
	held   int64            // bytes of buffered arrivals no receive has claimed
	heldBy map[uint64]int64 // held, by group id
}

func newMailbox(peer int, pool *framePool, limit int64) *mailbox {
	return &mailbox{peer: peer, pool: pool, limit: limit, chans: map[chanKey]*channel{}, heldBy: map[uint64]int64{}}
}

// hold accounts n more (or, negative, fewer) buffered bytes of group.
// Called with m.mu held.
func (m *mailbox) hold(group uint64, n int64) {
	m.held += n
	if m.heldBy[group] += n; m.heldBy[group] == 0 {
		delete(m.heldBy, group)
	}
}

// heldFor is the bytes buffered for group.
func (m *mailbox) heldFor(group uint64) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.heldBy[group]
}

// framePool recycles the buffers of full-size frames that arrived before
// their receive (a message sent before its Recv was issued), so a long one
// costs no allocation and zeroing per frame.
type framePool struct{ p sync.Pool }

func (f *framePool) get(n int) ([]byte, bool) {
	if n != pieceBytes {
		return alignedBytes(n), false
	}
	if b, ok := f.p.Get().(*[]byte); ok {
		return *b, true
	}
	return alignedBytes(n), true
}

func (f *framePool) put(b []byte) { f.p.Put(&b) }

func (m *mailbox) channel(k chanKey) *channel {
	c := m.chans[k]
	if c == nil {
		c = &channel{}
		m.chans[k] = c
	}
	return c
}

func (m *mailbox) tidy(k chanKey, c *channel) {
	if len(c.posted) == 0 && len(c.arrived) == 0 {
		delete(m.chans, k)
	}
}

// post registers a receive; a frame already buffered satisfies it at once.
func (m *mailbox) post(r *req) {
	m.mu.Lock()
	c := m.channel(r.key)
	if len(c.arrived) > 0 {
		a := c.arrived[0]
		c.arrived = c.arrived[1:]
		m.tidy(r.key, c)
		m.hold(r.key.group, -int64(len(a.data)))
		if !a.ready {
			a.claimed = r // the reader finishes it
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()
		r.done <- m.complete(r, a)
		return
	}
	if m.err != nil {
		m.tidy(r.key, c)
		m.mu.Unlock()
		r.done <- m.err
		return
	}
	c.posted = append(c.posted, r)
	m.mu.Unlock()
}

// take is the reader's side: the posted receive for a frame with header h,
// or, when none is posted, a new arrival to read the payload into; or an
// error when buffering the frame would pass the mailbox's limit.
func (m *mailbox) take(h header) (*req, *arrival, error) {
	k := chanKey{h.group, h.tag}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c := m.chans[k]; c != nil && len(c.posted) > 0 {
		r := c.posted[0]
		c.posted = c.posted[1:]
		m.tidy(k, c)
		return r, nil, nil
	}
	if n := int64(h.length); m.held+n > m.limit {
		return nil, nil, &comm.PeerError{Rank: m.peer, Op: "recv", Err: fmt.Errorf(
			"%w: rank %d sent a %d-byte frame (group %#x, tag %#x) while this rank already held %d bytes from it for receives not yet posted (MaxBuffered=%d, %s)",
			comm.ErrBufferFull, m.peer, n, h.group, h.tag, m.held, m.limit, EnvMaxBuffered)}
	}
	c := m.channel(k)
	a := &arrival{last: h.last, bf16: h.bf16}
	a.data, a.pooled = m.pool.get(int(h.length))
	c.arrived = append(c.arrived, a)
	m.hold(k.group, int64(len(a.data)))
	return nil, a, nil
}

// filled marks an arrival complete and finishes a receive that claimed it.
func (m *mailbox) filled(a *arrival, err error) {
	m.mu.Lock()
	a.ready, a.err = true, err
	r := a.claimed
	m.mu.Unlock()
	if r != nil {
		r.done <- m.complete(r, a)
	}
}

// deliver hands a whole frame to the mailbox (sends to oneself).
func (m *mailbox) deliver(k chanKey, data []byte, last, bf16 bool) error {
	r, a, err := m.take(header{group: k.group, tag: k.tag, length: uint32(len(data)), last: last, bf16: bf16})
	switch {
	case err != nil:
		return err
	case r != nil:
		r.done <- m.complete(r, &arrival{data: data, last: last, bf16: bf16, ready: true})
		return nil
	}
	copy(a.data, data)
	m.filled(a, nil)
	return nil
}

// complete copies or reduces a buffered arrival into its receive.
func (m *mailbox) complete(r *req, a *arrival) error {
	if a.err != nil {
		return a.err
	}
	if err := m.check(r, len(a.data), a.last, a.bf16); err != nil {
		return err
	}
	if r.red != nil {
		r.red.apply(r.dst, a.data)
	} else {
		copy(r.dst, a.data)
	}
	if a.pooled {
		m.pool.put(a.data)
	}
	return nil
}

// check holds a frame to the dtype and size its receive expects: a
// mismatch means the ranks issued different operations, sizes or dtypes.
func (m *mailbox) check(r *req, n int, last, bf16 bool) error {
	if n == len(r.dst) && last == r.last && bf16 == r.bf16 {
		return nil
	}
	return &comm.PeerError{Rank: m.peer, Op: "recv", Err: fmt.Errorf(
		"%w: rank %d sent %s where %s was expected: the ranks issued different operations, sizes or dtypes",
		comm.ErrArgs, m.peer, frameDesc(n, last, bf16), frameDesc(len(r.dst), r.last, r.bf16))}
}

func frameDesc(n int, last, bf16 bool) string {
	dt, es := "fp32", 4
	if bf16 {
		dt, es = "bf16", 2
	}
	more := ""
	if !last {
		more = " with more to follow"
	}
	return fmt.Sprintf("%d %s elements%s", n/es, dt, more)
}

// fail fails every posted receive and every later one that finds no
// buffered frame. The first error sticks.
func (m *mailbox) fail(err error) {
	m.mu.Lock()
	if m.err == nil {
		m.err = err
	}
	var rs []*req
	for k, c := range m.chans {
		rs = append(rs, c.posted...)
		c.posted = nil
		m.tidy(k, c)
	}
	err = m.err
	m.mu.Unlock()
	for _, r := range rs {
		r.done <- err
	}
}

// failed reports whether fail was called.
func (m *mailbox) failed() bool { return m.error() != nil }

// error is the error fail was first called with.
func (m *mailbox) error() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// cancelGroup fails the posted receives of one group.
func (m *mailbox) cancelGroup(group uint64, err error) {
	m.mu.Lock()
	var rs []*req
	for k, c := range m.chans {
		if k.group == group {
			rs = append(rs, c.posted...)
			c.posted = nil
			m.tidy(k, c)
		}
	}
	m.mu.Unlock()
	for _, r := range rs {
		r.done <- err
	}
}
