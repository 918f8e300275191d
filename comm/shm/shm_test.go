package shm

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"trellis/comm"
	"trellis/comm/commtest"
)

// testDir is a fresh directory under /dev/shm (or the temp dir where there
// is none) removed when the test ends.
func testDir(t testing.TB) string {
	t.Helper()
	base := DefaultDir
	if _, err := os.Stat(base); err != nil {
		base = ""
	}
	d, err := os.MkdirTemp(base, "trellis-shm-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func randomName() string {
	var b [6]byte
	rand.Read(b[:])
	return "t" + hex.EncodeToString(b[:])
}

// startWorld starts n ranks of one world as goroutines of this process;
// set adjusts each rank's config.
func startWorld(t testing.TB, n int, set func(r int, c *Config)) []comm.Group {
	t.Helper()
	dir, name := testDir(t), randomName()
	gs := make([]comm.Group, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := Config{Rank: r, Size: n, Name: name, Dir: dir}
			if set != nil {
				set(r, &c)
			}
			gs[r], errs[r] = New(c)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	t.Cleanup(func() {
		for _, g := range gs {
			g.Close()
		}
	})
	return gs
}

// TestConformance runs the comm conformance suite with every rank a
// goroutine holding its own mapping of the world (as a process would);
// Kill marks a rank's process dead for the liveness check, as a kill -9
// would, without telling its segment anything.
func TestConformance(t *testing.T) {
	commtest.Run(t, func(t *testing.T, n int, opts commtest.Options) commtest.World {
		dead := make([]atomic.Bool, n)
		gs := startWorld(t, n, func(r int, c *Config) {
			c.Timeout, c.MaxBuffered = opts.Timeout, opts.MaxBuffered
			c.alive = func(q int) bool { return !dead[q].Load() }
		})
		return commtest.World{Groups: gs, Kill: func(r int) { dead[r].Store(true) }}
	})
}

// A collective's wait for a late member is Skew (comm/local's test of the
// same): member 0 arrives at once, member 1 after 60 ms.
func TestSkewIsTheWaitForPeers(t *testing.T) {
	gs := startWorld(t, 2, nil)
	const late = 60 * time.Millisecond
	if err := commtest.Parallel(gs, time.Minute, func(r int, g comm.Group) error {
		if r == 1 {
			time.Sleep(late)
		}
		return comm.AllReduce(g, comm.F32(make([]float32, 1024)), comm.Sum)
	}); err != nil {
		t.Fatal(err)
	}
	s0, s1 := gs[0].Stats(), gs[1].Stats()
	if s0.Skew < late*2/3 || s0.Skew > s0.Wait {
		t.Errorf("member 0 (first to arrive): skew %v of wait %v, want about %v", s0.Skew, s0.Wait, late)
	}
	if s1.Skew > late/3 {
		t.Errorf("member 1 (last to arrive): skew %v of wait %v, want about 0", s1.Skew, s1.Wait)
	}
}
