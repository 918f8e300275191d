package local_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"trellis/comm"
	"trellis/comm/commtest"
	"trellis/comm/local"
)

func factory(t *testing.T, n int, opts commtest.Options) commtest.World {
	gs, err := local.New(local.Config{Size: n, Timeout: opts.Timeout, MaxBuffered: opts.MaxBuffered})
	if err != nil {
		t.Fatal(err)
	}
	return commtest.World{Groups: gs}
}

func TestConformance(t *testing.T) { commtest.Run(t, factory) }

// TestConformancePolled: the suite again with receivers that poll
// (Config.Poll), whose posted Recvs complete on their senders.
func TestConformancePolled(t *testing.T) {
	commtest.Run(t, func(t *testing.T, n int, opts commtest.Options) commtest.World {
		gs, err := local.New(local.Config{Size: n, Timeout: opts.Timeout, MaxBuffered: opts.MaxBuffered, Poll: 50 * time.Microsecond})
		if err != nil {
			t.Fatal(err)
		}
		return commtest.World{Groups: gs}
	})
}

// TestPolledWaitsEndWithTheirOperations: with Poll set, a posted Recv is
// done when its Send returns — no goroutine has to run first — and a
// Wait or a barrier that polls returns when the operation ends, not when
// the poll would have run out.
func TestPolledWaitsEndWithTheirOperations(t *testing.T) {
	gs := newWorld(t, local.Config{Size: 2, Poll: time.Second})
	w := gs[1].Recv(comm.F32([]float32{0}), 0, 1)
	if err := comm.Send(gs[0], comm.F32([]float32{3}), 1, 1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.(interface{ Done() <-chan struct{} }).Done():
	default:
		t.Fatal("the posted Recv was not done when its Send returned")
	}
	if err := w.Wait(); err != nil {
		t.Fatal(err)
	}
	w = gs[1].Recv(comm.F32([]float32{0}), 0, 2)
	go func() {
		time.Sleep(20 * time.Millisecond)
		comm.Send(gs[0], comm.F32([]float32{4}), 1, 2)
	}()
	start := time.Now()
	if err := w.Wait(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("a Wait polling for up to 1 s took %v for an operation that ended after 20 ms", d)
	}
	// A member polling at a collective's barrier leaves it when its peer
	// arrives, not when the poll runs out.
	run(t, gs, func(r int, g comm.Group) error {
		if r == 1 {
			time.Sleep(20 * time.Millisecond)
		}
		start := time.Now()
		if err := comm.AllReduce(g, comm.F32([]float32{1}), comm.Sum); err != nil {
			return err
		}
		if d := time.Since(start); d > 500*time.Millisecond {
			return fmt.Errorf("rank %d: an all-reduce polling for up to 1 s took %v with a peer 20 ms late", r, d)
		}
		return nil
	})
	if _, err := local.New(local.Config{Size: 2, Poll: -time.Microsecond}); err == nil || !strings.Contains(err.Error(), "Poll") {
		t.Errorf("a negative Poll: %v, want an error naming Poll", err)
	}
}

func newWorld(t *testing.T, cfg local.Config) []comm.Group {
	t.Helper()
	gs, err := local.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, g := range gs {
			g.Close()
		}
	})
	return gs
}

func run(t *testing.T, gs []comm.Group, fn func(r int, g comm.Group) error) {
	t.Helper()
	if err := commtest.Parallel(gs, time.Minute, fn); err != nil {
		t.Fatal(err)
	}
}

// TestMismatchedCalls: members that issue different collectives, lengths or
// roots all get ErrArgs instead of reading each other's buffers wrongly.
func TestMismatchedCalls(t *testing.T) {
	cases := []struct {
		name string
		do   func(r int, g comm.Group) error
		want string
	}{
		{"lengths", func(r int, g comm.Group) error {
			return comm.AllReduce(g, comm.F32(make([]float32, 4+r)), comm.Sum)
		}, "× fp32 but member"},
		{"ops", func(r int, g comm.Group) error {
			if r == 0 {
				return comm.AllReduce(g, comm.F32(make([]float32, 4)), comm.Sum)
			}
			return comm.Broadcast(g, comm.F32(make([]float32, 4)), 0)
		}, "issued"},
		{"reductions", func(r int, g comm.Group) error {
			return comm.AllReduce(g, comm.F32(make([]float32, 4)), comm.ReduceOp(r))
		}, "reduces with"},
		{"roots", func(r int, g comm.Group) error {
			return comm.Broadcast(g, comm.F32(make([]float32, 4)), r)
		}, "root"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gs := newWorld(t, local.Config{Size: 2})
			run(t, gs, func(r int, g comm.Group) error {
				err := c.do(r, g)
				if !errors.Is(err, comm.ErrArgs) || !strings.Contains(err.Error(), c.want) {
					return errors.New("got " + errString(err) + ", want ErrArgs mentioning " + c.want)
				}
				return nil
			})
		})
	}
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

// TestTimeoutNamesLowestAbsent: with ranks 1 and 3 absent, the error names 1
// and lists both.
func TestTimeoutNamesLowestAbsent(t *testing.T) {
	gs := newWorld(t, local.Config{Size: 4, Timeout: 100 * time.Millisecond})
	run(t, gs, func(r int, g comm.Group) error {
		if r%2 == 1 {
			return nil
		}
		err := comm.Barrier(g)
		var pe *comm.PeerError
		if !errors.As(err, &pe) || pe.Rank != 1 || !errors.Is(err, comm.ErrTimeout) || !strings.Contains(err.Error(), "[1 3]") {
			return errors.New("got " + errString(err))
		}
		return nil
	})
}

// TestCloseCascadesAndNamesAreReusable: closing a world group closes the
// subgroups made from it; a name can be used again after its groups closed;
// NewGroup on a closed group fails.
func TestCloseCascadesAndNamesAreReusable(t *testing.T) {
	gs := newWorld(t, local.Config{Size: 2})
	run(t, gs, func(r int, g comm.Group) error {
		for round := 0; round < 2; round++ {
			sub, err := g.NewGroup("again", []int{1, 0})
			if err != nil {
				return err
			}
			buf := []float32{float32(r + round)}
			if err := comm.AllReduce(sub, comm.F32(buf), comm.Sum); err != nil {
				return err
			}
			if buf[0] != float32(1+2*round) {
				return errors.New("wrong sum on a reused name")
			}
			if err := comm.Barrier(sub); err != nil {
				return err
			}
			if err := sub.Close(); err != nil {
				return err
			}
			if err := sub.Close(); err != nil {
				return errors.New("second Close: " + err.Error())
			}
		}
		sub, err := g.NewGroup("child", []int{0, 1})
		if err != nil {
			return err
		}
		if err := comm.Barrier(g); err != nil {
			return err
		}
		g.Close()
		if err := comm.Barrier(sub); !errors.Is(err, comm.ErrClosed) {
			return errors.New("subgroup after world Close: " + errString(err))
		}
		if _, err := g.NewGroup("late", []int{0, 1}); !errors.Is(err, comm.ErrClosed) {
			return errors.New("NewGroup after Close: " + errString(err))
		}
		return nil
	})
}

// TestPointToPointPaths covers a Recv posted before its Send (the handover
// path), a Send to self, and a message delivered before its sender closed.
func TestPointToPointPaths(t *testing.T) {
	for _, poll := range []time.Duration{0, 50 * time.Microsecond} {
		testPointToPointPaths(t, poll)
	}
}

func testPointToPointPaths(t *testing.T, poll time.Duration) {
	gs := newWorld(t, local.Config{Size: 2, Poll: poll})
	run(t, gs, func(r int, g comm.Group) error {
		buf := []float32{0, 0}
		if r == 0 {
			time.Sleep(20 * time.Millisecond) // let rank 1 post its Recv
			if err := comm.Send(g, comm.F32([]float32{1, 2}), 1, 3); err != nil {
				return err
			}
			if err := comm.Send(g, comm.F32([]float32{5, 6}), 0, 4); err != nil {
				return err
			}
			if err := comm.Recv(g, comm.F32(buf), 0, 4); err != nil || buf[1] != 6 {
				return errors.New("send to self: " + errString(err))
			}
			if err := comm.Send(g, comm.F32([]float32{7, 8}), 1, 5); err != nil {
				return err
			}
			return g.Close()
		}
		if err := comm.Recv(g, comm.F32(buf), 0, 3); err != nil || buf[0] != 1 || buf[1] != 2 {
			return errors.New("handover: " + errString(err))
		}
		time.Sleep(20 * time.Millisecond) // rank 0 has sent and maybe closed
		if err := comm.Recv(g, comm.F32(buf), 0, 5); err != nil || buf[0] != 7 {
			return errors.New("message sent before close: " + errString(err))
		}
		return nil
	})
}

// TestLinkEmulationLowerBounds: emulated latencies are paid, by link class.
// Only lower bounds are asserted (a sleep never returns early).
func TestLinkEmulationLowerBounds(t *testing.T) {
	const intra, inter = 5 * time.Millisecond, 40 * time.Millisecond
	gs := newWorld(t, local.Config{Size: 4, Link: &local.LinkModel{
		RanksPerNode: 2,
		Intra:        local.Link{Latency: intra},
		Inter:        local.Link{Latency: inter, Bandwidth: 1e8},
	}})
	run(t, gs, func(r int, g comm.Group) error {
		node, err := g.NewGroup("node", []int{r / 2 * 2, r/2*2 + 1})
		if err != nil {
			return err
		}
		start := time.Now()
		if err := comm.AllReduce(node, comm.F32(make([]float32, 8)), comm.Sum); err != nil {
			return err
		}
		if d := time.Since(start); d < intra {
			return errors.New("intra-node all-reduce faster than the intra latency: " + d.String())
		}
		start = time.Now()
		// 4 MB over a 100 MB/s inter-node port: ≥ 40 ms + the latency.
		if err := comm.AllGather(g, comm.F32(make([]float32, 4<<20)), comm.F32(make([]float32, 1<<20))); err != nil {
			return err
		}
		if d := time.Since(start); d < inter+40*time.Millisecond {
			return errors.New("inter-node all-gather faster than the model: " + d.String())
		}
		return nil
	})
}

// TestLinkSendsInOrder: with link emulation a large message and then a
// small one on the same (peer, tag) still arrive in the order sent.
func TestLinkSendsInOrder(t *testing.T) {
	gs := newWorld(t, local.Config{Size: 2, Link: &local.LinkModel{
		RanksPerNode: 2, Intra: local.Link{Latency: time.Millisecond, Bandwidth: 1e9}}})
	run(t, gs, func(r int, g comm.Group) error {
		if r == 0 {
			big := make([]float32, 1<<18)
			big[0] = 1
			w1 := g.Send(comm.F32(big), 1, 0) // both in flight at once
			w2 := g.Send(comm.F32([]float32{2}), 1, 0)
			return errors.Join(w1.Wait(), w2.Wait())
		}
		big, small := make([]float32, 1<<18), []float32{0}
		if err := errors.Join(comm.Recv(g, comm.F32(big), 0, 0), comm.Recv(g, comm.F32(small), 0, 0)); err != nil {
			return err
		}
		if big[0] != 1 || small[0] != 2 {
			return errors.New("messages overtook each other")
		}
		return nil
	})
}

// TestLinkP2PTiming: under link emulation a Send returns at once (the link
// delays delivery, not the sender); its message arrives no earlier than
// L + bytes/B after it was sent; a second message to the same peer queues
// behind the first for the bandwidth (≥ L + 2·bytes/B) but not for its
// latency, so a message sent after a long one still overlaps its latency.
// Lower bounds, plus one upper bound with a whole latency of slack.
func TestLinkP2PTiming(t *testing.T) {
	const lat, n = 200 * time.Millisecond, 1 << 16 // 256 KiB at 26.2144 MB/s: 10 ms
	const occ = 10 * time.Millisecond
	gs := newWorld(t, local.Config{Size: 2, Link: &local.LinkModel{Intra: local.Link{Latency: lat, Bandwidth: 4 * n / occ.Seconds()}}})
	var sent time.Time
	ready := make(chan struct{})
	run(t, gs, func(r int, g comm.Group) error {
		if r == 0 {
			defer close(ready)
			x, y := make([]float32, n), make([]float32, n)
			sent = time.Now()
			w1 := g.Send(comm.F32(x), 1, 0)
			w2 := g.Send(comm.F32(y), 1, 0)
			if d := time.Since(sent); d > lat/2 {
				return errors.New("two Sends blocked their sender for " + d.String())
			}
			return errors.Join(w1.Wait(), w2.Wait())
		}
		a, b := make([]float32, n), make([]float32, n)
		r1, r2 := g.Recv(comm.F32(a), 0, 0), g.Recv(comm.F32(b), 0, 0)
		if err := r1.Wait(); err != nil {
			return err
		}
		<-ready
		if d := time.Since(sent); d < lat+occ {
			return errors.New("first message arrived before L + bytes/B: " + d.String())
		}
		if err := r2.Wait(); err != nil {
			return err
		}
		switch d := time.Since(sent); {
		case d < lat+2*occ:
			return errors.New("second message did not queue for the bandwidth: " + d.String())
		case d >= 2*lat:
			return errors.New("second message waited for the first one's latency: " + d.String())
		}
		return nil
	})
}

// A collective's wait splits into the wait for peers and the transfer:
// member 0 arrives at once and member 1 after 60 ms, so member 0's Skew
// is about 60 ms of its Wait and member 1's (the last to arrive) is none;
// the same through a flat.Tracker-style wait on the Work after it ran on
// the queue is covered in parallel/flat.
func TestSkewIsTheWaitForPeers(t *testing.T) {
	gs := newWorld(t, local.Config{Size: 2})
	const late = 60 * time.Millisecond
	run(t, gs, func(r int, g comm.Group) error {
		if r == 1 {
			time.Sleep(late)
		}
		return comm.AllReduce(g, comm.F32(make([]float32, 1024)), comm.Sum)
	})
	s0, s1 := gs[0].Stats(), gs[1].Stats()
	if s0.Skew < late*2/3 || s0.Skew > s0.Wait {
		t.Errorf("member 0 (first to arrive): skew %v of wait %v, want about %v", s0.Skew, s0.Wait, late)
	}
	if s1.Skew > late/3 {
		t.Errorf("member 1 (last to arrive): skew %v of wait %v, want about 0", s1.Skew, s1.Wait)
	}
}

// A member's queue still busy with an earlier collective is not a peer
// still computing: both members issue a slow all-reduce (emulated links,
// 25 ms a phase) and then a second one at once, and wait on the second.
// Its last member issued it at the start, so no part of the wait is Skew
// (the barrier, reached once the first had run, said about 50 ms).
func TestQueuedIsNotSkew(t *testing.T) {
	gs := newWorld(t, local.Config{Size: 2, Link: &local.LinkModel{Intra: local.Link{Latency: 25 * time.Millisecond}}})
	run(t, gs, func(r int, g comm.Group) error {
		first := g.AllReduce(comm.F32(make([]float32, 1024)), comm.Sum)
		if err := g.AllReduce(comm.F32(make([]float32, 1024)), comm.Sum).Wait(); err != nil {
			return err
		}
		return first.Wait()
	})
	for r, g := range gs {
		if s := g.Stats(); s.Wait < 40*time.Millisecond || s.Skew > 10*time.Millisecond {
			t.Errorf("member %d: wait %v, skew %v: want about 50ms and no skew", r, s.Wait, s.Skew)
		}
	}
}

// A posted Recv reports its sender's lateness as Skew and the rest of its
// wait as the transfer's: member 0 sends 60 ms after member 1 posted, so
// about 60 ms of member 1's wait is Skew; under a 30 ms emulated link with
// the sender on time, the 30 ms are the link's, not Skew.
func TestRecvSkewIsTheSendersLateness(t *testing.T) {
	for _, c := range []struct {
		name      string
		late, lat time.Duration
		poll      time.Duration
	}{{"late sender", 60 * time.Millisecond, 0, 0}, {"slow link", 0, 30 * time.Millisecond, 0},
		{"late sender, polled", 60 * time.Millisecond, 0, 50 * time.Microsecond}, {"slow link, polled", 0, 30 * time.Millisecond, 50 * time.Microsecond}} {
		cfg := local.Config{Size: 2, Poll: c.poll}
		if c.lat > 0 {
			cfg.Link = &local.LinkModel{Intra: local.Link{Latency: c.lat}, Inter: local.Link{Latency: c.lat}}
		}
		gs := newWorld(t, cfg)
		posted := make(chan struct{})
		run(t, gs, func(r int, g comm.Group) error {
			if r == 0 {
				<-posted
				time.Sleep(c.late)
				return comm.Send(g, comm.F32([]float32{3}), 1, 1)
			}
			w := g.Recv(comm.F32([]float32{0}), 0, 1)
			close(posted)
			return w.Wait()
		})
		s := gs[1].Stats()
		if c.late > 0 && (s.Skew < c.late*2/3 || s.Skew > s.Wait || s.Wait-s.Skew > c.late/3) {
			t.Errorf("%s: skew %v of wait %v, want about %v of skew and little else", c.name, s.Skew, s.Wait, c.late)
		}
		if c.lat > 0 && (s.Wait < c.lat || s.Skew > c.lat/3) {
			t.Errorf("%s: skew %v of wait %v, want a wait of at least %v and little skew", c.name, s.Skew, s.Wait, c.lat)
		}
	}
}

// TestPollForOnlyWithCoresToSpare: ranks poll their waits only where
// their kernel threads do not outnumber the cores.
func TestPollForOnlyWithCoresToSpare(t *testing.T) {
	for _, c := range []struct {
		threads, cores int
		want           time.Duration
	}{{2, 2, 100 * time.Microsecond}, {1, 2, 100 * time.Microsecond}, {4, 8, 100 * time.Microsecond}, {4, 2, 0}, {3, 2, 0}} {
		if got := local.PollFor(c.threads, c.cores); got != c.want {
			t.Errorf("PollFor(threads %d, cores %d) = %v, want %v", c.threads, c.cores, got, c.want)
		}
	}
}
