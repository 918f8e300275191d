package tcp

import (
	"errors"
	"fmt"
	"net"
	"time"
)

// rendezvous: rank 0 serves the store; every rank listens for peers,
// publishes its address, dials the ranks below it and accepts the ranks
// above it.
// Rank 0 returns its store, which must serve until every rank is through.
func (w *world) rendezvous() (*store, error) {
	deadline := time.Now().Add(w.cfg.RendezvousTimeout)
	var st *store
	if w.rank == 0 {
		ln := w.cfg.StoreListener
		if ln == nil {
			var err error
			if ln, err = net.Listen("tcp", w.cfg.MasterAddr); err != nil {
				return nil, fmt.Errorf("tcp: rank 0 cannot serve the store at %s: %w", w.cfg.MasterAddr, err)
			}
		}
		st = serveStore(ln, w.token, w.size, w.cfg.Timeout)
	}
	err := w.connect(deadline)
	if err != nil && st != nil && st.abortErr() != nil {
		err = fmt.Errorf("tcp: rank 0: %w", st.abortErr()) // the refusal's own reason, with ErrAuth
	}
	return st, err
}

// connect publishes this rank's address, connects to every peer and starts
// the connections' goroutines.
func (w *world) connect(deadline time.Time) error {
	sc, err := dialStore(w.cfg.MasterAddr, w.token, w.rank, deadline)
	if err != nil {
		return err
	}
	defer sc.close()
	ln, err := w.listen(sc.conn)
	if err != nil {
		return err
	}
	defer ln.Close()
	if err := sc.set(fmt.Sprintf("addr/%d", w.rank), []byte(ln.Addr().String()), deadline); err != nil {
		return fmt.Errorf("tcp: rank %d: publish address: %w", w.rank, err)
	}
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
// a key nobody sets returns only when the store aborts (a rank was refused)
// or closes, and then the wait ends at once with the store's reason.
func (w *world) awaitPeers(sc *storeClient, ln net.Listener, acc <-chan error, deadline time.Time) error {
	watch := make(chan error, 1)
	go func() {
		_, err := sc.get("rendezvous/watch", deadline)
		watch <- err
		ln.Close()
	}()
	err := <-acc
	if err != nil {
		select {
		case werr := <-watch:
			err = fmt.Errorf("tcp: rank %d: %w", w.rank, werr)
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

// dialPeers connects to every lower rank.
func (w *world) dialPeers(sc *storeClient, deadline time.Time) error {
	for j := 0; j < w.rank; j++ {
		addr, err := sc.get(fmt.Sprintf("addr/%d", j), deadline)
		if err != nil {
			return fmt.Errorf("tcp: rank %d: address of rank %d: %w", w.rank, j, err)
		}
		c, err := net.DialTimeout("tcp", string(addr), time.Until(deadline))
		if err != nil {
			return fmt.Errorf("tcp: rank %d: connect to rank %d at %s: %w", w.rank, j, addr, err)
		}
		got, err := clientHandshake(c, w.token, rolePeer, w.rank, deadline)
		if err == nil && got != j {
			err = fmt.Errorf("tcp: rank %d: %s answered as rank %d, want %d", w.rank, addr, got, j)
		}
		if err != nil {
			c.Close()
			return err
		}
		w.setPeer(j, c)
	}
	return nil
}

// acceptPeers accepts one connection from every higher rank. A connection
// with a wrong or missing token fails the rendezvous (after refusing it):
// a rank of this job is misconfigured.
func (w *world) acceptPeers(ln net.Listener, deadline time.Time) error {
	if tl, ok := ln.(*net.TCPListener); ok {
		tl.SetDeadline(deadline)
	}
	for need := w.size - 1 - w.rank; need > 0; {
		c, err := ln.Accept()
		if err != nil {
			return fmt.Errorf("tcp: rank %d: waiting for %d higher ranks to connect: %w", w.rank, need, err)
		}
		check := func(r int) error {
			if r <= w.rank || r >= w.size || w.hasPeer(r) {
				return fmt.Errorf("unexpected rank %d (this is rank %d of %d)", r, w.rank, w.size)
			}
			return nil
		}
		r, err := serverHandshake(c, w.token, rolePeer, w.rank, deadline, check)
		if err != nil {
			c.Close()
			if errors.Is(err, ErrAuth) {
				return err
			}
			continue // a stray connection; keep waiting
		}
		w.setPeer(r, c)
		need--
	}
	return nil
}
