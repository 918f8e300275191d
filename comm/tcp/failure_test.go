package tcp

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"trellis/comm"
)

// TestKillDuringRing: a rank dies in the middle of large (ring) all-reduces;
// every survivor fails within the timeout naming it — also those that were
// waiting on a survivor rather than on the dead rank.
func TestKillDuringRing(t *testing.T) {
	const n, victim = 4, 0
	timeout := 2 * time.Second * raceSlow
	gs := startWorld(t, n, timeout, nil)
	started := make(chan struct{})
	var once sync.Once
	errs := make([]error, n)
	took := make([]time.Duration, n)
	var killedAt atomic.Int64 // unix nanoseconds
	var wg sync.WaitGroup
	for r := 1; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]float32, 1<<20)
			for i := 0; ; i++ {
				if i == 2 {
					once.Do(func() { close(started) })
				}
				if err := comm.AllReduce(gs[r], comm.F32(buf), comm.Sum); err != nil {
					errs[r], took[r] = err, time.Since(time.Unix(0, killedAt.Load()))
					return
				}
			}
		}()
	}
	buf := make([]float32, 1<<20)
	for i := 0; i < 2; i++ {
		if err := comm.AllReduce(gs[victim], comm.F32(buf), comm.Sum); err != nil {
			t.Fatal(err)
		}
	}
	// The victim issues one more all-reduce and dies in the middle of it.
	w := gs[victim].AllReduce(comm.F32(buf), comm.Sum)
	<-started
	time.Sleep(5 * time.Millisecond)
	killedAt.Store(time.Now().UnixNano())
	kill(gs[victim])
	w.Wait()
	wg.Wait()
	for r := 1; r < n; r++ {
		var pe *comm.PeerError
		if !errors.As(errs[r], &pe) || pe.Rank != victim {
			t.Errorf("rank %d: got %v, want a *comm.PeerError naming rank %d", r, errs[r], victim)
		}
		if took[r] > timeout {
			t.Errorf("rank %d failed %v after the kill, want within %v", r, took[r], timeout)
		}
	}
}

// TestDeadPeerSparesOthers: after a rank dies, a subgroup without it still
// works until this rank issues an operation that needs the dead one.
func TestDeadPeerSparesOthers(t *testing.T) {
	gs := startWorld(t, 3, 5*time.Second, nil)
	subs := make([]comm.Group, 2)
	for r := range subs {
		var err error
		if subs[r], err = gs[r].NewGroup("pair", []int{0, 1}); err != nil {
			t.Fatal(err)
		}
	}
	kill(gs[2])
	time.Sleep(50 * time.Millisecond) // let the survivors see the connection drop
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := []float32{float32(r + 1)}
			if err := comm.AllReduce(subs[r], comm.F32(buf), comm.Sum); err != nil || buf[0] != 3 {
				errs[r] = fmt.Errorf("pair all-reduce: %v, sum %v", err, buf[0])
				return
			}
			err := comm.AllReduce(gs[r], comm.F32(buf), comm.Sum)
			var pe *comm.PeerError
			if !errors.As(err, &pe) || pe.Rank != 2 {
				errs[r] = fmt.Errorf("world all-reduce: got %v, want a PeerError naming 2", err)
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestAbortNamesTheRankItIsGiven: a rank that learned of a failure on
// another transport (comm/hier's intra-host world) aborts this world with
// the rank that failed; its peers here, waiting on it in a barrier, fail
// naming that rank, reported by the aborting one — not the aborting rank
// closing its connection in good order, which is what they saw before
// Abort existed (and then, after Close, still do not).
func TestAbortNamesTheRankItIsGiven(t *testing.T) {
	gs := startWorld(t, 3, 5*time.Second, nil)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for r := 1; r < 3; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = comm.Barrier(gs[r])
		}()
	}
	time.Sleep(20 * time.Millisecond) // both wait on rank 0
	gs[0].(interface{ Abort(error) }).Abort(&comm.PeerError{Rank: 1, Op: "barrier", Err: errors.New("connection closed without goodbye (process died?)")})
	gs[0].Close()
	wg.Wait()
	for r := 1; r < 3; r++ {
		var pe *comm.PeerError
		if !errors.As(errs[r], &pe) || pe.Rank != 1 || !strings.Contains(errs[r].Error(), "reported by rank 0") {
			t.Errorf("rank %d: got %v, want a *comm.PeerError naming rank 1, reported by rank 0", r, errs[r])
		}
	}
}
