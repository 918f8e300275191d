package tcp

import (
	"net"
	"sync"
	"testing"
	"time"

	"trellis/comm"
)

const testToken = "test-token-0123456789abcdef"

// startWorld starts n ranks as goroutines of this process, each with its
// own listener and connections, on loopback, and closes them when t ends.
func startWorld(t testing.TB, n int, timeout time.Duration, edit func(r int, c *Config)) []comm.Group {
	t.Helper()
	groups, errs := tryWorld(t, n, timeout, edit)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	t.Cleanup(func() {
		for _, g := range groups {
			g.Close()
		}
	})
	return groups
}

// startWorldOn is startWorld with the store on ln.
func startWorldOn(t testing.TB, ln net.Listener, n int, edit func(r int, c *Config)) []comm.Group {
	t.Helper()
	groups, errs := tryWorldOn(t, ln, n, DefaultTimeout, edit)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	t.Cleanup(func() {
		for _, g := range groups {
			g.Close()
		}
	})
	return groups
}

// tryWorld starts a world and returns every rank's group or error.
func tryWorld(t testing.TB, n int, timeout time.Duration, edit func(r int, c *Config)) ([]comm.Group, []error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return tryWorldOn(t, ln, n, timeout, edit)
}

// tryWorldOn is tryWorld with the store on ln.
func tryWorldOn(t testing.TB, ln net.Listener, n int, timeout time.Duration, edit func(r int, c *Config)) ([]comm.Group, []error) {
	t.Helper()
	groups := make([]comm.Group, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		cfg := Config{Rank: r, Size: n, MasterAddr: ln.Addr().String(), Token: testToken,
			Timeout: timeout, OpTimeout: timeout, RendezvousTimeout: 20 * time.Second}
		if r == 0 {
			cfg.StoreListener = ln
		}
		if edit != nil {
			edit(r, &cfg)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			groups[r], errs[r] = New(cfg)
		}()
	}
	wg.Wait()
	if errs[0] != nil || n == 1 {
		ln.Close()
	}
	return groups, errs
}

// kill drops rank's connections without a goodbye, as a crash would.
func kill(g comm.Group) { g.(*group).w.close(false) }
