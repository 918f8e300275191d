package tcp

import (
	"fmt"
	"log/slog"
	"math/bits"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"trellis/comm"
)

// acceptPeers accepts one connection from every higher rank. Each accepted
// connection is authenticated on a goroutine of its own with a deadline of
// Timeout, so a silent or slow connection delays nobody; one that fails
// (a stray, a wrong token, an unexpected rank) is refused, logged and
// closed, and the wait goes on until RendezvousTimeout.
func (w *world) acceptPeers(ln net.Listener, deadline time.Time) error {
	need := w.size - 1 - w.rank
	if need == 0 {
		return nil
	}
	if tl, ok := ln.(*net.TCPListener); ok {
		tl.SetDeadline(deadline)
	}
	joined := make(chan struct{}, need)
	var hs handshakes
	defer hs.stop()
	accErr := make(chan error, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				accErr <- err
				return
			}
			hs.run(c, func() {
				if w.acceptPeer(c) {
					joined <- struct{}{}
				}
			})
		}
	}()
	defer ln.Close() // ends the accept goroutine
	for ; need > 0; need-- {
		select {
		case <-joined:
		case err := <-accErr:
			if isTimeout(err) {
				return fmt.Errorf("tcp: rank %d: %w after %v: ranks %s never connected to this rank",
					w.rank, comm.ErrTimeout, w.cfg.RendezvousTimeout, rankList(w.unconnected()))
			}
			return fmt.Errorf("tcp: rank %d: waiting for ranks %s to connect: %w", w.rank, rankList(w.unconnected()), err)
		}
	}
	return nil
}

// acceptPeer authenticates one connection to the peer listener and keeps
// it if it is a higher rank of this job not yet connected.
func (w *world) acceptPeer(c net.Conn) bool {
	claimed := -1
	check := func(r int) error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if r <= w.rank || r >= w.size || w.peers[r] != nil || w.claimed[r] {
			return fmt.Errorf("unexpected rank %d (this is rank %d of %d, expecting ranks %s)", r, w.rank, w.size, rankList(w.unconnectedLocked()))
		}
		w.claimed[r], claimed = true, r
		return nil
	}
	r, keys, err := serverHandshake(c, w.token, rolePeer, w.rank, time.Now().Add(w.cfg.Timeout), w.cfg.FrameAuth, check)
	if err != nil {
		c.Close()
		if claimed >= 0 {
			w.mu.Lock()
			w.claimed[claimed] = false
			w.mu.Unlock()
		}
		w.refused.log(w.log, "tcp: refused a connection to the peer listener", "rank", w.rank, "from", c.RemoteAddr().String(), "reason", err)
		return false
	}
	w.setPeer(r, c, keys)
	return true
}

// handshakes tracks the connections being authenticated, so that the
// ones still in progress when the rendezvous ends are closed.
type handshakes struct {
	mu    sync.Mutex
	wg    sync.WaitGroup
	conns map[net.Conn]bool
	done  bool
}

func (h *handshakes) run(c net.Conn, fn func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		c.Close()
		return
	}
	if h.conns == nil {
		h.conns = map[net.Conn]bool{}
	}
	h.conns[c] = true
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		fn()
		h.mu.Lock()
		delete(h.conns, c)
		h.mu.Unlock()
	}()
}

// stop interrupts the handshakes in progress and waits for them (a
// connection already kept as a peer is no longer tracked).
func (h *handshakes) stop() {
	h.mu.Lock()
	h.done = true
	for c := range h.conns {
		c.SetDeadline(time.Now())
	}
	h.mu.Unlock()
	h.wg.Wait()
}

// refusals rate-limits the log lines about refused connections: the first
// ten, then one at every power of two, so a flood cannot flood the log.
type refusals struct {
	mu sync.Mutex
	n  int
}

func (f *refusals) log(l *slog.Logger, msg string, args ...any) {
	f.mu.Lock()
	f.n++
	n := f.n
	f.mu.Unlock()
	if n <= 10 || bits.OnesCount(uint(n)) == 1 {
		l.Warn(msg, append(args, "refused_so_far", n)...)
	}
}

// unconnected lists the peers this rank has no connection to yet.
func (w *world) unconnected() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.unconnectedLocked()
}

func (w *world) unconnectedLocked() []int {
	var out []int
	for r, p := range w.peers {
		if r != w.rank && p == nil {
			out = append(out, r)
		}
	}
	return out
}

// Phases of joining, for the waiting log.
const (
	phaseStore = iota // reaching the store
	phasePeers        // connecting to the peers
)

func (w *world) setJoining(phase int) {
	w.mu.Lock()
	w.joining = phase
	w.mu.Unlock()
}

// logWaiting logs, every waitLogEvery until stop is called, whom this rank
// is waiting for; rank 0 adds the ranks that have not joined the store.
func (w *world) logWaiting(st *store, start time.Time) (stop func()) {
	every := w.cfg.waitLogEvery
	if every <= 0 {
		every = defaultWaitLogEvery
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			w.mu.Lock()
			phase := w.joining
			w.mu.Unlock()
			args := []any{"rank", w.rank, "waited", time.Since(start).Round(time.Second), "timeout", w.cfg.RendezvousTimeout}
			if phase == phaseStore {
				w.log.Info("tcp: rendezvous: waiting for the store (rank 0)", append(args, "store", w.cfg.MasterAddr)...)
				continue
			}
			args = append(args, "unconnected_ranks", rankList(w.unconnected()))
			if st != nil {
				missing, _ := st.joined()
				args = append(args, "not_joined", rankList(missing))
			}
			w.log.Info("tcp: rendezvous: waiting for peers", args...)
		}
	}()
	return func() { close(done); wg.Wait() }
}

// defaultWaitLogEvery is how often a rank logs whom it waits for.
const defaultWaitLogEvery = 5 * time.Second

// missingReport adds to a rendezvous timeout what rank 0's store knows:
// the ranks that never joined, and the hosts of those that did.
func (w *world) missingReport(st *store) string {
	if st == nil {
		return " (rank 0's error lists every rank that never joined)"
	}
	missing, hosts := st.joined()
	if len(missing) == 0 {
		return "; every rank joined the store"
	}
	return fmt.Sprintf("; ranks %s never joined the store (joined from hosts %s)", rankList(missing), strings.Join(hosts, ", "))
}

// rankList formats ranks compactly: "3, 5-7"; "none" if empty.
func rankList(rs []int) string {
	if len(rs) == 0 {
		return "none"
	}
	rs = slices.Clone(rs)
	slices.Sort(rs)
	var parts []string
	for i := 0; i < len(rs); {
		j := i
		for j+1 < len(rs) && rs[j+1] == rs[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(rs[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", rs[i], rs[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}
