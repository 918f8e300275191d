package hier

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"testing"

	"trellis/comm"
	"trellis/comm/commtest"
	"trellis/comm/local"
	"trellis/comm/shm"
)

// startHier starts a world of n ranks as goroutines: hosts[r] is rank r's
// host; each host's ranks share a comm/shm world, and every rank is in
// one comm/local world standing for the network. Kill closes a rank's
// network endpoint (as a dead process's connections close) and leaves
// its shared memory silent.
func startHier(t *testing.T, hosts []int, opts commtest.Options) commtest.World {
	t.Helper()
	n := len(hosts)
	inter, err := local.New(local.Config{Size: n, Timeout: opts.Timeout, MaxBuffered: opts.MaxBuffered})
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("/dev/shm", "trellis-hier-test-")
	if err != nil {
		dir = t.TempDir()
	} else {
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	var b [6]byte
	rand.Read(b[:])
	name := hex.EncodeToString(b[:])
	members := map[int][]int{}
	for r, h := range hosts {
		members[h] = append(members[h], r)
	}
	gs := make([]comm.Group, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ms := members[h]
			idx := 0
			for i, m := range ms {
				if m == r {
					idx = i
				}
			}
			intra, err := shm.New(shm.Config{Rank: idx, Size: len(ms), Name: fmt.Sprintf("h%s-%d", name, h), Dir: dir,
				WorldRanks: ms, Timeout: opts.Timeout, MaxBuffered: opts.MaxBuffered})
			if err != nil {
				errs[r] = err
				return
			}
			gs[r], errs[r] = New(Config{Inter: inter[r], Intra: intra, Hosts: hosts})
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return commtest.World{Groups: gs, Kill: func(r int) { inter[r].Close() }}
}

// TestConformance runs the conformance suite on hierarchies whose hosts
// hold contiguous halves of the world, and on hierarchies whose hosts
// alternate (every member a run of its own: the longest chain).
func TestConformance(t *testing.T) {
	layouts := map[string]func(r, n int) int{
		"halves":    func(r, n int) int { return r * 2 / n },
		"alternate": func(r, n int) int { return r % 2 },
		"threes":    func(r, n int) int { return r / 3 },
	}
	for name, host := range layouts {
		if raceEnabled && name != "alternate" {
			continue // under the race detector, the layout with the most phases (every member a run)
		}
		t.Run(name, func(t *testing.T) {
			commtest.Run(t, func(t *testing.T, n int, opts commtest.Options) commtest.World {
				hosts := make([]int, n)
				for r := range hosts {
					hosts[r] = host(r, n)
				}
				return startHier(t, hosts, opts)
			})
		})
	}
}
