package tcp

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"trellis/comm"
)

// Start-up abuse: connections that are not ranks of this job, to the store
// or to a peer listener, are refused and logged; the job starts anyway.

// logBuf is a goroutine-safe log sink.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuf) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// stray is one kind of unwanted connection: attack connects (so the
// connection is queued at the listener before anything else) and returns
// the rest of the attack, which runs on a goroutine. A silent one stays
// open until the test ends.
type stray struct {
	name   string
	attack func(t *testing.T, addr string, role byte) func()
	logged string // what the refusal log must say ("" for silent: refused only after Timeout)
}

var strays = []stray{
	{"silent", func(t *testing.T, addr string, _ byte) func() {
		c := dial(t, addr)
		t.Cleanup(func() { c.Close() })
		return func() {}
	}, ""},
	{"garbage", func(t *testing.T, addr string, _ byte) func() {
		c := dial(t, addr)
		return func() {
			defer c.Close()
			c.Write(bytes.Repeat([]byte("GET / HTTP/1.1\r\n"), 4))
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			c.Read(make([]byte, 1)) // until the server gives up on it
		}
	}, "not a trellis peer"},
	{"wrong token", func(t *testing.T, addr string, role byte) func() {
		c := dial(t, addr)
		return func() {
			defer c.Close()
			_, _, err := clientHandshake(c, []byte("a-stray-job-token-0123456789"), role, 1, time.Now().Add(5*time.Second), true)
			if !errors.Is(err, ErrAuth) {
				t.Errorf("stray with a wrong token: got %v, want ErrAuth", err)
			}
		}
	}, "wrong job token"},
	{"no token", func(t *testing.T, addr string, role byte) func() {
		c := dial(t, addr)
		return func() {
			defer c.Close()
			if _, _, err := clientHandshake(c, nil, role, 1, time.Now().Add(5*time.Second), true); !errors.Is(err, ErrAuth) {
				t.Errorf("stray without a token: got %v, want ErrAuth", err)
			}
		}
	}, "it has no job token"},
}

func dial(t *testing.T, addr string) net.Conn {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestStrayConnections: before any rank joins, each kind of stray connects
// to the store; before rank 0 publishes its address, each connects to its
// peer listener. The world still forms and works, each refusal is logged,
// and the silent ones do not stall it: the handshake timeout (Timeout) is
// longer than the whole rendezvous deadline, so a handshake that blocked
// the accept loop would fail start-up.
func TestStrayConnections(t *testing.T) {
	for _, s := range strays {
		t.Run(s.name, func(t *testing.T) {
			var logs logBuf
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var attacks sync.WaitGroup
			launch := func(rest func()) {
				attacks.Add(1)
				go func() { defer attacks.Done(); rest() }()
			}
			launch(s.attack(t, ln.Addr().String(), roleStore))
			listening := make(chan struct{})
			gs := startWorldOn(t, ln, 3, func(r int, c *Config) {
				c.Timeout, c.RendezvousTimeout, c.Logger = 30*time.Second, 10*time.Second, logs.logger()
				switch r {
				case 0:
					c.onListen = func(a net.Addr) { launch(s.attack(t, a.String(), rolePeer)); close(listening) }
				case 1:
					// Ranks 1 and 2 start once both strays have their
					// answers: the rendezvous ends when they join, and it
					// closes the handshakes still in progress (on a loaded
					// machine a stray's turn could come after that).
					<-listening
					attacks.Wait()
				}
			})
			if err := allReduceAll(gs); err != nil {
				t.Fatal(err)
			}
			attacks.Wait()
			if s.logged == "" {
				return
			}
			wants := []string{"refused a connection to the rendezvous store", "refused a connection to the peer listener", s.logged}
			var out string
			for try := 0; try < 50; try++ { // the server logs just after it answers
				out = logs.String()
				if containsAll(out, wants) {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Errorf("log lacks one of %q:\n%s", wants, out)
		})
	}
}

func containsAll(s string, subs []string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}

// allReduceAll all-reduces a one-element buffer on every rank.
func allReduceAll(gs []comm.Group) error {
	errs := make([]error, len(gs))
	var wg sync.WaitGroup
	for r, g := range gs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := []float32{float32(r)}
			errs[r] = comm.AllReduce(g, comm.F32(x), comm.Sum)
			if want := float32(len(gs) * (len(gs) - 1) / 2); errs[r] == nil && x[0] != want {
				errs[r] = errors.New("wrong sum")
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// TestMissingRank: a rank that never starts is named in rank 0's error,
// with the hosts of those that joined, and in the waiting lines every rank
// logs meanwhile.
func TestMissingRank(t *testing.T) {
	var logs logBuf
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const n = 4 // rank 3 never starts
	errs := make([]error, n-1)
	var wg sync.WaitGroup
	for r := range n - 1 {
		cfg := Config{Rank: r, Size: n, MasterAddr: ln.Addr().String(), Token: testToken,
			Timeout: 5 * time.Second, RendezvousTimeout: 1500 * time.Millisecond, Logger: logs.logger(), waitLogEvery: 200 * time.Millisecond}
		if r == 0 {
			cfg.StoreListener = ln
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, err := New(cfg)
			if err == nil {
				g.Close()
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	if !errors.Is(errs[0], comm.ErrTimeout) || !strings.Contains(errs[0].Error(), "ranks 3 never joined the store (joined from hosts 127.0.0.1)") {
		t.Errorf("rank 0: got %v, want a timeout naming rank 3 and the joined hosts", errs[0])
	}
	for r := 1; r < n-1; r++ {
		if errs[r] == nil || !strings.Contains(errs[r].Error(), "ranks 3 ") {
			t.Errorf("rank %d: got %v, want an error naming rank 3", r, errs[r])
		}
	}
	out := logs.String()
	for _, want := range []string{"tcp: rendezvous: waiting for peers", "rank=0", "not_joined=3", "unconnected_ranks=3"} {
		if !strings.Contains(out, want) {
			t.Errorf("waiting log lacks %q:\n%s", want, out)
		}
	}
}

// TestMissingRankZero: without rank 0 there is no store; a rank says so
// while it waits and when it gives up.
func TestMissingRankZero(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nobody serves the store
	var logs logBuf
	_, err = New(Config{Rank: 1, Size: 2, MasterAddr: addr, Token: testToken, RendezvousTimeout: time.Second,
		Logger: logs.logger(), waitLogEvery: 200 * time.Millisecond})
	if !errors.Is(err, comm.ErrTimeout) || !strings.Contains(err.Error(), "cannot reach the rendezvous store at "+addr+" (rank 0)") {
		t.Errorf("got %v, want a timeout naming the store and rank 0", err)
	}
	if out := logs.String(); !strings.Contains(out, "tcp: rendezvous: waiting for the store (rank 0)") {
		t.Errorf("no waiting line:\n%s", out)
	}
}
