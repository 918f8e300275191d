package world

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"

	"trellis/comm"
	"trellis/comm/commtest"
	"trellis/comm/shm"
	"trellis/comm/tcp"
)

// openAll opens backend on n goroutine ranks of one job on loopback, rank
// r on host hosts[r]; env adds variables (the job token is set).
func openAll(t *testing.T, backend string, hosts []int, env map[string]string, log *slog.Logger) []*World {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir, err := os.MkdirTemp(shm.DefaultDir, "trellis-world-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	vars := map[string]string{tcp.EnvToken: "0123456789abcdef0123", shm.EnvDir: dir}
	for k, v := range env {
		vars[k] = v
	}
	n := len(hosts)
	ws := make([]*World, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		local, lr := 0, 0
		for q, h := range hosts {
			if h == hosts[r] {
				if q < r {
					lr++
				}
				local++
			}
		}
		p := &Placement{Rank: r, Size: n, LocalRank: lr, LocalSize: local, NodeRank: hosts[r], MasterAddr: "127.0.0.1", MasterPort: port}
		hostVars := map[string]string{shm.EnvName: fmt.Sprintf("wt%d-h%d", port, hosts[r])}
		lookup := func(k string) (string, bool) {
			if v, ok := hostVars[k]; ok {
				return v, true
			}
			v, ok := vars[k]
			return v, ok
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ws[r], errs[r] = Open(backend, Config{Placement: p, Lookup: lookup, Log: log})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, w := range ws {
			w.Close()
		}
	})
	return ws
}

func groups(ws []*World) []comm.Group {
	gs := make([]comm.Group, len(ws))
	for i, w := range ws {
		gs[i] = w.Group
	}
	return gs
}

// auto on one host is shm; across hosts it is the hierarchy over real TCP
// and shared memory, and its reductions are rank order bit for bit.
func TestAuto(t *testing.T) {
	for _, c := range []struct {
		hosts []int
		want  string
	}{{[]int{0, 0, 0}, "shm"}, {[]int{0, 0, 1, 1}, "hier"}, {[]int{0, 1, 0, 1}, "hier"}, {[]int{0, 1, 2}, "tcp"}} {
		t.Run(fmt.Sprint(c.hosts), func(t *testing.T) {
			if raceEnabled && c.want != "hier" {
				t.Skip("under the race detector only the hierarchies (comm/shm and comm/tcp are raced on their own)")
			}
			ws := openAll(t, "auto", c.hosts, nil, nil)
			for r, w := range ws {
				if w.Backend != c.want {
					t.Fatalf("rank %d opened %s, want %s", r, w.Backend, c.want)
				}
			}
			if err := commtest.CheckRankOrder(groups(ws)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// auto where /dev/shm is unusable stays on tcp, and the rank that found
// it says why in one warning naming the directory.
func TestAutoFallsBack(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, nil))
	ws := openAll(t, "auto", []int{0, 0}, map[string]string{shm.EnvDir: "/nonexistent-trellis-shm"}, log)
	for _, w := range ws {
		if w.Backend != "tcp" {
			t.Fatalf("opened %s, want tcp", w.Backend)
		}
	}
	out := buf.String()
	if !strings.Contains(out, "falls back to tcp") || !strings.Contains(out, "/nonexistent-trellis-shm") {
		t.Errorf("warnings:\n%s", out)
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func TestOpenErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"nccl", Config{}, "want one of"},
		{"tcp", Config{Unplaced: errors.New("no RANK")}, "no RANK"},
		{"shm", Config{}, "launcher"},
		{"shm", Config{Placement: &Placement{Size: 4, LocalSize: 2}}, "ranks of one host"},
	} {
		if _, err := Open(c.name, c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%s): %v, want an error containing %q", c.name, err, c.want)
		}
	}
	w, err := Open("local", Config{})
	if err != nil || w.Group != nil || w.Backend != "local" {
		t.Errorf("Open(local): %+v, %v", w, err)
	}
	w, err = Open("auto", Config{})
	if err != nil || w.Group != nil || w.Backend != "local" {
		t.Errorf("Open(auto) without a launcher: %+v, %v, want local", w, err)
	}
}
