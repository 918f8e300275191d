package tcp

import (
	"errors"
	"fmt"
	"net"
	"time"

	"trellis/comm"
)

// rendezvous: rank 0 serves the store; every rank listens for peers,
// publishes its address, dials the ranks below it and accepts the ranks
// above it. While it waits it logs, every few seconds, whom it waits for.
// Rank 0 returns its store, which must serve until every rank is through.
//
// Start-up is robust to strays: a connection to the store or to a peer
// listener that is not a rank of this job (no token, a wrong token, not
// Trellis at all, or silent) is refused and logged after at most Timeout,
// each on its own goroutine, and the rendezvous goes on. Only a rank that
// is refused itself (its token differs) fails, at once, with the reason.
func (w *world) rendezvous() (*store, error) {
	start := time.Now()
	deadline := start.Add(w.cfg.RendezvousTimeout)
	var st *store
	if w.rank == 0 {
		ln := w.cfg.StoreListener
		if ln == nil {
			var err error
			if ln, err = net.Listen("tcp", w.cfg.MasterAddr); err != nil {
				return nil, fmt.Errorf("tcp: rank 0 cannot serve the store at %s: %w", w.cfg.MasterAddr, err)
			}
		}
		st = serveStore(ln, w.token, w.size, w.cfg.Timeout, w.log)
	}
	stop := w.logWaiting(st, start)
	err := w.connect(deadline)
	stop()
	if err != nil && errors.Is(err, comm.ErrTimeout) {
		err = fmt.Errorf("%w%s", err, w.missingReport(st))
	}
	return st, err
}

// connect publishes this rank's address, connects to every peer and starts
// the connections' goroutines.
func (w *world) connect(deadline time.Time) error {
	sc, err := dialStore(w.cfg.MasterAddr, w.token, w.rank, deadline, w.cfg.Timeout)
	if err != nil {
		return err
	}
	defer sc.close()
	ln, err := w.listen(sc.conn)
	if err != nil {
		return err
	}
	defer ln.Close()
	if w.cfg.onListen != nil {
		w.cfg.onListen(ln.Addr())
	}
	if err := sc.set(fmt.Sprintf("addr/%d", w.rank), []byte(ln.Addr().String()), deadline); err != nil {
		return fmt.Errorf("tcp: rank %d: publish address: %w", w.rank, err)
	}
	w.setJoining(phasePeers)
	acc := make(chan error, 1)
	go func() { acc <- w.acceptPeers(ln, deadline) }()
	if err = w.dialPeers(sc, deadline); err != nil {
		ln.Close() // stops the accept loop
		<-acc
	} else {
		err = w.awaitPeers(sc, ln, acc, deadline)
	}
	if err != nil {
		w.closeConns()
		return err
	}
	for _, p := range w.peers {
		if p != nil {
			p.start()
		}
	}
	return nil
}

// awaitPeers waits for the accept loop while watching the store: a get of
// a key nobody sets returns only when the store closes (rank 0 gave up),
// and then the wait ends at once.
func (w *world) awaitPeers(sc *storeClient, ln net.Listener, acc <-chan error, deadline time.Time) error {
	watch := make(chan error, 1)
	go func() {
		_, err := sc.get("rendezvous/watch", deadline)
		watch <- err
		if !isTimeout(err) { // at the deadline the accept loop reports the timeout itself
			ln.Close()
		}
	}()
	err := <-acc
	if err != nil && !errors.Is(err, comm.ErrTimeout) {
		select {
		case werr := <-watch:
			err = fmt.Errorf("tcp: rank %d: rank 0 closed the rendezvous store (it gave up: see its error) while this rank waited for ranks %s to connect: %w",
				w.rank, rankList(w.unconnected()), werr)
		default:
		}
	}
	return err
}

// listen opens the peer listener on cfg.ListenAddr, or on the address this
// rank uses to reach the store.
func (w *world) listen(storeConn net.Conn) (net.Listener, error) {
	addr := w.cfg.ListenAddr
	if addr == "" {
		host, _, _ := net.SplitHostPort(storeConn.LocalAddr().String())
		addr = net.JoinHostPort(host, "0")
	} else if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(addr, "0")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("tcp: rank %d: listen for peers at %s: %w", w.rank, addr, err)
	}
	return ln, nil
}

// dialPeers connects to every lower rank. The address comes from the
// (authenticated) store; the handshake gets at most Timeout.
func (w *world) dialPeers(sc *storeClient, deadline time.Time) error {
	for j := 0; j < w.rank; j++ {
		addr, err := sc.get(fmt.Sprintf("addr/%d", j), deadline)
		if err != nil {
			if isTimeout(err) {
				return fmt.Errorf("tcp: rank %d: %w after %v: rank %d never published its address (it has not joined)",
					w.rank, comm.ErrTimeout, w.cfg.RendezvousTimeout, j)
			}
			return fmt.Errorf("tcp: rank %d: address of rank %d: %w", w.rank, j, err)
		}
		c, err := net.DialTimeout("tcp", string(addr), min(time.Until(deadline), w.cfg.Timeout))
		if err != nil {
			return fmt.Errorf("tcp: rank %d: connect to rank %d at %s: %w", w.rank, j, addr, err)
		}
		if w.cfg.wrapConn != nil {
			c = w.cfg.wrapConn(c)
		}
		got, keys, err := clientHandshake(c, w.token, rolePeer, w.rank, earliest(deadline, w.cfg.Timeout), w.cfg.FrameAuth)
		if err == nil && got != j {
			err = fmt.Errorf("tcp: rank %d: %s answered as rank %d, want %d", w.rank, addr, got, j)
		}
		if err != nil {
			c.Close()
			return fmt.Errorf("tcp: rank %d: connecting to rank %d: %w", w.rank, j, err)
		}
		w.setPeer(j, c, keys)
	}
	return nil
}

// earliest is the earlier of deadline and now + d.
func earliest(deadline time.Time, d time.Duration) time.Time {
	if t := time.Now().Add(d); t.Before(deadline) {
		return t
	}
	return deadline
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
