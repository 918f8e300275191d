// Package tcp is the comm backend for ranks that are processes, on one host
// or many: persistent TCP connections between every pair of ranks, a
// rendezvous through a key-value store that rank 0 serves at MasterAddr,
// HMAC authentication with the job token on every connection, and, with
// Config.FrameAuth, an AES-GCM tag on every frame under per-connection
// session keys (seal.go). docs/SECURITY.md states the threat model.
//
// Start-up. Connections that are not ranks of this job (strays, wrong
// tokens, silent ones) are refused and logged, each handshake on its own
// goroutine within Timeout; they never abort or stall the rendezvous. A rank
// logs whom it waits for every few seconds, and a rendezvous that times out
// names the ranks that never joined (rank 0 also the hosts that did).
//
// Connections. Each pair of ranks shares one connection; every group
// multiplexes over it, with the group id and a tag in each frame. A reader
// goroutine per connection always drains the socket, straight into the
// receive waiting for a frame or into a buffer when none waits yet; a writer
// goroutine sends queued frames, and a heartbeat when idle.
//
// Algorithms, for a group of p ranks and n bytes:
//
//	all-reduce      n·(p-1) ≤ 64 KiB: every rank sends its buffer to all and reduces
//	                in rank order (one step); else a reduce-scatter then ring
//	                all-gather, each chunk cut into pieces so that receiving,
//	                reducing and forwarding overlap: 2(p-1)/p·n bytes per rank.
//	reduce-scatter  the first half of the above: the ring for p = 2, else direct
//	                (rank j's chunk from every rank, folded in rank order piece
//	                by piece), so every sum is comm/local's bit for bit (algo.go)
//	all-gather      the second half (direct below the threshold)
//	broadcast       root sends to all (small, or p = 2); else a pipelined chain
//	all-to-all      direct, every pair at once
//	barrier         dissemination: ⌈log2 p⌉ rounds of empty messages
//	send/recv       pieces on the user's tag, in order per (peer, tag), outside the
//	                group's queue: queued to the connection or posted to the
//	                mailbox when issued (see comm)
//
// Failure. A connection that breaks without a goodbye, or stays silent for
// Timeout (heartbeats keep idle connections talking), marks that peer dead:
// whatever this rank still needs from it, or sends to it, fails with a
// *comm.PeerError naming it, while frames it sent before dying are still
// delivered. An operation that waits longer than OpTimeout for a live peer
// declares that peer dead the same way, with comm.ErrTimeout. The first
// operation to fail breaks this rank's world: every pending and later
// operation on every group fails with the same *comm.PeerError, and an abort
// frame naming the dead rank goes to every peer (the named one too: if it
// is alive, a tampered frame or a flood, say, it learns why) before the
// connections close. A rank that reads an abort treats the sender as failed
// because of the named rank, so ranks that were waiting on a rank that gave
// up, rather than on the dead one, fail too and name the original (the
// named rank itself is judged by this rank's own connection to it). So a
// kill -9
// makes every rank fail within moments, naming the killed rank, while
// operations that had already received everything they need from it
// still complete.
package tcp

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"trellis/comm"
)

// world is one rank's view of all ranks: the connections and the groups.
type world struct {
	cfg   Config
	token []byte
	rank  int
	size  int
	peers []*peer  // by world rank; nil for this rank
	self  *mailbox // sends to oneself
	pool  framePool
	log   *slog.Logger

	refused refusals // rate limit of the refused-connection log
	claimed []bool   // ranks whose handshake passed the check, by world rank (guarded by mu)
	joining int      // phaseStore or phasePeers (guarded by mu)

	mu        sync.Mutex
	groups    map[uint64]*group
	err       error           // first failure
	firstLost *comm.PeerError // the first peer whose connection broke
	closing   bool
	flushed   chan struct{} // closed once fail's abort frames are written (or given up on)
	lingered  chan struct{} // closed once fail's connections have ended (lingerClose)
	shut      chan struct{} // closed once the connections are closed
	once      sync.Once
}

// New joins the world described by cfg and returns the world group (ranks
// 0..Size-1). It blocks until every rank has connected, or fails after
// RendezvousTimeout naming the ranks that never joined; a rank whose job
// token differs from rank 0's is refused and fails at once with the reason,
// while the ranks it tried to join log the refusal and keep waiting (so a
// stray process cannot abort a job).
func New(cfg Config) (comm.Group, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !isLittleEndian() {
		return nil, errors.New("tcp: big-endian hosts are not supported (the wire format is little-endian)")
	}
	cfg = cfg.withDefaults()
	w := &world{cfg: cfg, token: []byte(cfg.Token), rank: cfg.Rank, size: cfg.Size,
		peers: make([]*peer, cfg.Size), claimed: make([]bool, cfg.Size), log: cfg.Logger,
		groups: map[uint64]*group{}, flushed: make(chan struct{}), lingered: make(chan struct{}), shut: make(chan struct{})}
	w.self = newMailbox(cfg.Rank, &w.pool, cfg.MaxBuffered)
	g := w.newGroup(0, "world", identity(cfg.Size))
	if cfg.Size == 1 {
		return g, nil
	}
	st, err := w.rendezvous()
	if err != nil {
		g.shutdown()
		if st != nil {
			st.close() // the ranks waiting on it stop waiting
		}
		return nil, err
	}
	if st != nil {
		defer st.close() // after the barrier: until then ranks may still read addresses
	}
	// A barrier on a private group (so the world's Stats start at zero):
	// when it returns, every rank has connected to every other.
	rdv := w.newGroup(rendezvousGroup, "rendezvous", identity(cfg.Size))
	err = comm.Barrier(rdv)
	rdv.shutdown()
	if err != nil {
		w.close(true)
		return nil, fmt.Errorf("tcp: rendezvous barrier: %w", err)
	}
	return g, nil
}

// rendezvousGroup is the id of New's private barrier group (subgroup ids
// are odd, the world's is 0).
const rendezvousGroup = 2

func identity(n int) []int {
	r := make([]int, n)
	for i := range r {
		r[i] = i
	}
	return r
}

func (w *world) setPeer(r int, c net.Conn, keys sessionKeys) {
	p := newPeer(w, r, c, keys)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.peers[r] = p
}

func (w *world) isClosing() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closing
}

// fail breaks the world with pe: every group's queue fails, every posted
// receive and queued send fails, every other peer is told which rank died,
// and the connections close shortly after. Only the first call acts.
func (w *world) fail(pe *comm.PeerError) {
	w.mu.Lock()
	if w.err != nil || w.closing {
		w.mu.Unlock()
		return
	}
	w.err = pe
	groups := make([]*group, 0, len(w.groups))
	for _, g := range w.groups {
		groups = append(groups, g)
	}
	w.mu.Unlock()
	for _, g := range groups {
		g.q.Fail(pe)
	}
	var aborts []*req
	reason := []byte(pe.Err.Error())
	if len(reason) > maxReasonBytes {
		reason = reason[:maxReasonBytes]
	}
	for _, p := range w.peers {
		if p != nil { // the named rank too: if it is alive, it learns why (aborted)
			h := header{typ: frameAbort, tag: uint64(pe.Rank), timeout: errors.Is(pe, comm.ErrTimeout)}
			aborts = append(aborts, p.sendCtrl(h, reason))
		}
	}
	w.self.fail(pe)
	for _, p := range w.peers {
		if p != nil {
			p.box.fail(pe)
			p.out.failData(pe)
		}
	}
	go func() {
		waitAll(aborts, time.Second)
		close(w.flushed)
		w.lingerClose(time.Second)
		close(w.lingered)
	}()
}

// lingerClose ends every connection after a failure without losing the
// abort frames just written: closing a socket whose receive queue holds
// unread bytes sends a reset, which discards what this rank sent but the
// peer has not yet read (the abort among it). So each connection is first
// half-closed (a FIN after the queued bytes), the readers keep draining
// until the peers close their ends or limit passes, and only then are the
// connections closed.
func (w *world) lingerClose(limit time.Duration) {
	t := time.NewTimer(limit)
	defer t.Stop()
	for _, p := range w.peers {
		if p == nil {
			continue
		}
		if hc, ok := p.conn.(interface{ CloseWrite() error }); ok {
			hc.CloseWrite()
		}
	}
	for _, p := range w.peers {
		if p == nil {
			continue
		}
		select {
		case <-p.readerDone:
		case <-t.C:
			w.closeConns()
			return
		}
	}
	w.closeConns()
}

// aborted handles an abort frame from rank `from` naming pe.Rank: `from`
// has given up because pe.Rank failed, so anything this rank still needs
// from `from`, or sends to it, fails naming pe.Rank. The named rank itself
// is judged by this rank's own connection to it (frames it sent before
// dying may still be on their way; if it is dead that connection breaks
// too). Operations that need neither still complete; the first that fails
// fails the world (op.end), which passes the news on. An abort naming this
// rank itself (its peers found it silent) fails the world at once.
func (w *world) aborted(from int, pe *comm.PeerError) {
	if pe.Rank == w.rank {
		w.fail(pe)
		return
	}
	w.lostPeer(pe) // the original, should its own connection break later
	if p := w.peers[from]; p != nil {
		p.box.fail(pe)
		p.out.failData(pe)
	}
}

// awaitAborts returns once the abort frames of a failure are on their way,
// so that a process exiting on the error still tells its peers who died
// (they read the abort before the end of the connection).
func (w *world) awaitAborts() {
	w.mu.Lock()
	failed := w.err != nil
	w.mu.Unlock()
	if failed {
		<-w.flushed
	}
}

// lostPeer records a broken connection and returns the error to report for
// it: a connection that breaks after another one did most likely broke
// because that rank died first (its peers exit on the error), so the
// original is named.
func (w *world) lostPeer(pe *comm.PeerError) *comm.PeerError {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.firstLost == nil {
		w.firstLost = pe
		return pe
	}
	if w.firstLost.Rank == pe.Rank {
		return pe
	}
	return &comm.PeerError{Rank: w.firstLost.Rank, Op: pe.Op,
		Err: fmt.Errorf("%v (then rank %d's connection broke too: %v)", w.firstLost.Err, pe.Rank, pe.Err)}
}

// waitAll waits for reqs until limit has passed.
func waitAll(rs []*req, limit time.Duration) {
	t := time.NewTimer(limit)
	defer t.Stop()
	for _, r := range rs {
		select {
		case <-r.done:
		case <-t.C:
			return
		}
	}
}

// closeConns closes every connection once; readers and writers then stop.
func (w *world) closeConns() {
	w.once.Do(func() {
		for _, p := range w.peers {
			if p != nil {
				p.conn.Close()
			}
		}
		close(w.shut)
	})
}

// close says goodbye to every peer (after the frames already queued) unless
// goodbye is false (a simulated crash), then closes the connections and
// every group. Pending operations fail with comm.ErrClosed.
func (w *world) close(goodbye bool) {
	w.mu.Lock()
	if w.closing {
		w.mu.Unlock()
		return
	}
	w.closing = true
	failed := w.err != nil
	groups := make([]*group, 0, len(w.groups))
	for _, g := range w.groups {
		groups = append(groups, g)
	}
	w.mu.Unlock()
	if goodbye && failed {
		// The failure's abort frames are on their way (fail): closing the
		// connections now would reset them unread (lingerClose), and the
		// peers would name this rank instead of the one that failed.
		<-w.lingered
	}
	if goodbye && !failed {
		var byes []*req
		for _, p := range w.peers {
			if p != nil {
				byes = append(byes, p.sendCtrl(header{typ: frameBye}, nil))
			}
		}
		waitAll(byes, w.cfg.Timeout)
	}
	w.closeConns()
	w.self.fail(comm.ErrClosed)
	for _, p := range w.peers {
		if p != nil {
			p.box.fail(comm.ErrClosed)
			p.out.failData(comm.ErrClosed)
			if p.readerDone != nil {
				<-p.readerDone
				<-p.writerDone
			}
		}
	}
	for _, g := range groups {
		g.shutdown()
	}
}
