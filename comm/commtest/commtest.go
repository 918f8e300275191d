// Package commtest is the conformance suite every comm backend passes: one
// set of tests, run from each backend's own tests,
//
//	func TestConformance(t *testing.T) { commtest.Run(t, factory) }
//
// where the Factory starts a world of n ranks for the backend and returns
// each rank's world group. The suite drives rank r through Groups[r] from
// goroutines of its own (Parallel), so a backend whose ranks are processes
// must let one test process host them all (comm/tcp: one TCP endpoint per
// rank goroutine).
//
// What it holds a backend to, beyond comm's documentation:
//   - every op on fp32 and bf16, sizes 0, 1, odd, not divisible by the
//     group size and large, world sizes 1–8, Sum, Avg and Max;
//   - reductions within rounding-aware bounds: fp32 exact for small integers
//     and within p·2⁻²⁴·Σ|x| for reals; bf16 accumulates in fp32 and may
//     round once per step, so within p·2⁻⁸·Σ|x|; Avg is the sum scaled by
//     1/p; Max is exact; every rank gets bit-identical all-reduce results;
//   - all-reduce and reduce-scatter equal, bit for bit, comm.Reduce of the
//     ranks' buffers folded in rank order 0, 1, …, p-1 (what comm/local
//     computes), checked at p = 3 and 4 on values of many magnitudes
//     (CheckRankOrder);
//   - AllGather with src = this rank's chunk of dst and ReduceScatter with dst
//     = this rank's chunk of src work in place;
//   - comm.AllToAllV (segments of any length, some empty, over Send and
//     Recv) delivers every segment where the counts say, with a collective
//     in flight, and refuses inconsistent counts;
//   - Send completes without waiting for the matching Recv (both sides of an
//     exchange may send first, even 1 MiB), tags select messages, and
//     messages with one (peer, tag) arrive in order;
//   - Send and Recv never wait for the queue or each other: receives posted
//     first (both neighbours of a ring), rank 0 receiving before sending
//     while rank 1 sends first with a collective in between, and dozens of
//     messages in flight through BatchP2P, all complete; buffered messages
//     show in Stats.Buffered, and a sender beyond MaxBuffered fails the
//     group with ErrBufferFull;
//   - subgroups (NewGroup), nested and permuted, and differently named groups
//     over the same ranks progress independently, also from several
//     goroutines of one rank;
//   - async ops complete in issue order whatever order they are waited in;
//   - Stats count completed ops, bytes within the op's buffer sizes, and
//     Busy and Wait within the wall time;
//   - bad arguments fail with ErrArgs at issue time, without communication,
//     and leave the group usable;
//   - a rank that stops participating, closes its world group or is killed
//     makes every peer's pending op fail with a *comm.PeerError naming it
//     within the timeout, and later ops fail fast.
package commtest

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"trellis/comm"
)

// Options are what the suite asks of a world.
type Options struct {
	// Timeout is the deadline the backend must apply to every wait on
	// peers. The failure tests use a short one.
	Timeout time.Duration
	// MaxBuffered, if not 0, is the bound the backend must apply to the
	// bytes a rank buffers for receives not yet posted (its MaxBuffered).
	MaxBuffered int64
}

// World is a started world of ranks.
type World struct {
	Groups []comm.Group // Groups[r] is rank r's world group
	// Kill, if set, stops rank r abruptly, as a crash would (tcp: drop its
	// connections without a goodbye). The suite calls it from rank r's
	// goroutine and then never uses Groups[r] again (except Close). If nil
	// the kill test is skipped; the close test covers Close.
	Kill func(r int)
}

// Factory starts a world of n ranks. It may fail the test (t.Fatal) and
// register cleanups on t; the suite closes every group itself when the test
// ends.
type Factory func(t *testing.T, n int, opts Options) World

const (
	normalTimeout = 20 * time.Second // deadline for worlds that should not fail
	failTimeout   = time.Second      // deadline for the failure tests
	watchdog      = 90 * time.Second // a rank still running after this has hung
	// slack is how much later than the timeout a failure may be reported.
	slack = 3 * time.Second
)

// env is what a case needs: the test and either the factory (in-process
// mode) or this process's world (SPMD mode, see RunRank).
type env struct {
	t     *testing.T
	f     Factory
	spmd  *spmd
	large int // element count of the large cases
}

// world starts a world of n ranks and closes its groups when the test ends.
// In SPMD mode it is a fresh subgroup of ranks 0..n-1 of the process's
// world, and Groups[r] is nil for every rank r this process does not drive.
func (e *env) world(n int, timeout time.Duration) World {
	e.t.Helper()
	return e.worldOpts(n, Options{Timeout: timeout})
}

func (e *env) worldOpts(n int, opts Options) World {
	e.t.Helper()
	var w World
	if e.spmd != nil {
		w = e.spmd.start(e.t, n, opts)
	} else {
		w = e.f(e.t, n, opts)
	}
	if len(w.Groups) != n {
		e.t.Fatalf("factory returned %d groups for a world of %d", len(w.Groups), n)
	}
	e.t.Cleanup(func() {
		for _, g := range w.Groups {
			if g != nil {
				g.Close()
			}
		}
	})
	return w
}

// fits reports whether a world of n ranks can be started (SPMD mode: no
// more than the processes launched).
func (e *env) fits(n int) bool { return e.spmd == nil || n <= e.spmd.size() }

type testCase struct {
	name string
	run  func(e *env) error
	// inProcess, if set, is why the case cannot run in SPMD mode.
	inProcess string
}

func cases() []testCase {
	var cs []testCase
	for n := 1; n <= 8; n++ {
		cs = append(cs, testCase{name: fmt.Sprintf("Collectives/n=%d", n), run: collectives(n)})
	}
	for _, n := range []int{2, 3, 8} {
		cs = append(cs, testCase{name: fmt.Sprintf("Large/n=%d", n), run: large(n)})
	}
	for _, n := range []int{3, 4} {
		cs = append(cs, testCase{name: fmt.Sprintf("RankOrder/n=%d", n), run: rankOrder(n)})
	}
	for _, n := range []int{2, 3, 5} {
		cs = append(cs, testCase{name: fmt.Sprintf("PointToPoint/n=%d", n), run: pointToPoint(n)})
	}
	for _, n := range []int{1, 3, 4} {
		cs = append(cs, testCase{name: fmt.Sprintf("AllToAllV/n=%d", n), run: allToAllV(n)})
	}
	for _, n := range []int{2, 4} {
		cs = append(cs, testCase{name: fmt.Sprintf("PointToPoint/RecvFirst/n=%d", n), run: recvFirst(n)},
			testCase{name: fmt.Sprintf("PointToPoint/ManyInFlight/n=%d", n), run: manyInFlight(n)})
	}
	return append(cs,
		testCase{name: "PointToPoint/CrossOrder", run: crossOrder},
		testCase{name: "PointToPoint/Buffered", run: buffered},
		testCase{name: "PointToPoint/BufferBound", run: bufferBound},
		testCase{name: "RecvMismatch", run: recvMismatch},
		testCase{name: "Barrier", run: barrierCase},
		testCase{name: "Subgroups", run: subgroups},
		testCase{name: "NamedGroupsIndependent", run: namedGroups},
		testCase{name: "AsyncOrder", run: asyncOrder},
		testCase{name: "Stats", run: statsCase},
		testCase{name: "Args", run: argsCase},
		testCase{name: "Failure/Silent", run: silentPeer, inProcess: noFailures},
		testCase{name: "Failure/SilentSender", run: silentSender, inProcess: noFailures},
		testCase{name: "Failure/Close", run: closePeer, inProcess: noFailures},
		testCase{name: "Failure/Kill", run: killPeer, inProcess: noFailures},
	)
}

// Run runs the whole suite against the backend f makes.
func Run(t *testing.T, f Factory) {
	for _, c := range cases() {
		t.Run(c.name, func(t *testing.T) {
			err := c.run(&env{t: t, f: f, large: largeElems()})
			if errors.Is(err, errSkip) {
				t.Skip("the backend's World has no Kill")
			}
			if err != nil {
				t.Error(err)
			}
		})
	}
}

// largeElems is the element count of the large cases.
func largeElems() int {
	if testing.Short() || raceEnabled {
		return 1 << 17
	}
	return 1 << 20
}

// errSkip makes a case skip its test.
var errSkip = errors.New("commtest: skipped")

// Ranks runs fn for every rank of groups at once (Parallel, with a
// limit of ten minutes) and fails t with the ranks' errors. A rank whose fn
// fails closes every group, so that no peer waits for it.
func Ranks(t testing.TB, groups []comm.Group, fn func(r int, g comm.Group) error) {
	t.Helper()
	err := Parallel(groups, 10*time.Minute, func(r int, g comm.Group) error {
		err := fn(r, g)
		if err != nil {
			for _, g := range groups {
				g.Close()
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Parallel runs fn for every rank on a goroutine of its own and returns the
// ranks' errors joined, each prefixed with its rank, or an error naming the
// ranks still running after limit (their goroutines are left behind). Ranks
// whose group is nil (driven by other processes, SPMD mode) are skipped.
func Parallel(groups []comm.Group, limit time.Duration, fn func(r int, g comm.Group) error) error {
	errs := make([]error, len(groups))
	var mu sync.Mutex
	running := map[int]bool{}
	for r, g := range groups {
		if g != nil {
			running[r] = true
		}
	}
	var wg sync.WaitGroup
	for r, g := range groups {
		if g == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := fn(r, g)
			mu.Lock()
			errs[r] = err
			delete(running, r)
			mu.Unlock()
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(limit):
		mu.Lock()
		defer mu.Unlock()
		var hung []int
		for r := range running {
			hung = append(hung, r)
		}
		sort.Ints(hung)
		return fmt.Errorf("commtest: ranks %v still running after %v (hung)", hung, limit)
	}
	var out []error
	for r, err := range errs {
		if err != nil {
			out = append(out, fmt.Errorf("rank %d: %w", r, err))
		}
	}
	return errors.Join(out...)
}

// each runs fn on every rank with the default watchdog.
func each(groups []comm.Group, fn func(r int, g comm.Group) error) error {
	return Parallel(groups, watchdog, fn)
}
