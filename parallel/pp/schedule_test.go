package pp

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"trellis/trace"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// shapes are the schedules the golden files hold.
func shapes() []Config {
	var out []Config
	for _, k := range Kinds() {
		for _, p := range []int{2, 4} {
			for _, m := range []int{4, 8} {
				v := 1
				if k == Interleaved {
					v = 2
				}
				if k == DualPipeV { // m ≥ 2p; two chunks per rank
					v, m = 2, m*p/2
				}
				out = append(out, Config{Kind: k, PP: p, VPP: v, Micro: m})
			}
		}
	}
	return out
}

// wantIdle is the textbook bubble of each rank at costs c: (p−1)(F+B+W)
// for gpipe and 1f1b, the same per chunk (so 1/v of it per whole model)
// for interleaved, (p−1)(F+B−W) for zb-h1, (p−1)(F + 2B − 2W) per chunk
// for dualpipev (its (p−1)(F&B + B − 3W) with F&B = F+B+W: nothing
// overlaps here; at F = B = W, (p−1)·F).
func wantIdle(k Kind, p int, c Costs) int64 {
	switch k {
	case ZBH1:
		return int64(p-1) * (c.F + c.B - c.W)
	case DualPipeV:
		return int64(p-1) * (c.F + 2*c.B - 2*c.W)
	}
	return int64(p-1) * (c.F + c.B + c.W)
}

func TestScheduleGolden(t *testing.T) {
	for _, c := range shapes() {
		name := fmt.Sprintf("%s_p%d_v%d_m%d", c.Kind, c.PP, c.VPP, c.Micro)
		t.Run(name, func(t *testing.T) {
			s, err := Build(c)
			if err != nil {
				t.Fatal(err)
			}
			res, err := Simulate(s, Unit)
			if err != nil {
				t.Fatal(err)
			}
			busy := int64(c.Micro*c.VPP) * 3
			if got, want := res.Makespan, busy+wantIdle(c.Kind, c.PP, Unit); got != want {
				t.Errorf("makespan %d, want %d (busy %d + textbook bubble)", got, want, busy)
			}
			for r, n := range res.InFlight {
				if want := PeakInFlight(c, r); n != want {
					t.Errorf("rank %d: %d micro-batches in flight, want %d", r, n, want)
				}
			}
			got := s.Format() + fmt.Sprintf("makespan=%d busy=%v in-flight=%v bubble=%.4f\n",
				res.Makespan, res.Busy, res.InFlight, res.Bubble())
			path := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update)", err)
			}
			if got != string(want) {
				t.Errorf("schedule differs from %s (go test -update rewrites it):\n%s", path, got)
			}
		})
	}
}

// TestBubbleAtOtherCosts: the 1F1B-family formulas hold at unequal F, B, W.
func TestBubbleAtOtherCosts(t *testing.T) {
	costs := Costs{F: 2, B: 3, W: 2}
	for _, k := range []Kind{GPipe, OneFOneB, Interleaved} {
		for _, p := range []int{2, 3, 4} {
			c := Config{Kind: k, PP: p, VPP: 1, Micro: 2 * p}
			if k == Interleaved {
				c.VPP = 3
			}
			s, err := Build(c)
			if err != nil {
				t.Fatal(err)
			}
			res, err := Simulate(s, costs)
			if err != nil {
				t.Fatal(err)
			}
			busy := int64(c.Micro*c.VPP) * (costs.F + costs.B + costs.W)
			if want := busy + wantIdle(k, p, costs); res.Makespan != want {
				t.Errorf("%s pp=%d: makespan %d, want %d", k, p, res.Makespan, want)
			}
		}
	}
}

// TestSimulatorCatches: the simulator rejects broken lists.
func TestSimulatorCatches(t *testing.T) {
	base := func() *Schedule {
		s, err := Build(Config{Kind: OneFOneB, PP: 2, Micro: 2})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	cases := []struct {
		name, want string
		mutate     func(s *Schedule)
	}{
		{"deadlock", "deadlocks", func(s *Schedule) {
			// rank 0 waits for a gradient before sending the activation it needs.
			r := s.Ranks[0]
			i := indexOf(r, Action{Op: SendAct, MB: 0, Peer: 1})
			j := indexOf(r, Action{Op: RecvGrad, MB: 0, Peer: 1})
			r[i], r[j] = r[j], r[i]
		}},
		{"backward before forward", "before its forward", func(s *Schedule) {
			r := s.Ranks[1]
			i := indexOf(r, Action{Op: Forward, MB: 1})
			j := indexOf(r, Action{Op: Backward, MB: 1})
			r[i], r[j] = r[j], r[i]
		}},
		{"missing backward", "backwards", func(s *Schedule) {
			r := s.Ranks[0]
			i := indexOf(r, Action{Op: Backward, MB: 1})
			s.Ranks[0] = append(r[:i:i], r[i+1:]...)
		}},
		{"wrong peer", "wrong rank", func(s *Schedule) {
			r := s.Ranks[1]
			r[indexOf(r, Action{Op: RecvAct, MB: 0, Peer: 0})].Peer = 1
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := base()
			tc.mutate(s)
			_, err := Simulate(s, Unit)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

func indexOf(acts []Action, a Action) int {
	for i, x := range acts {
		if x == a {
			return i
		}
	}
	panic(fmt.Sprintf("%v not in list", a))
}

func TestBadConfigs(t *testing.T) {
	cases := []struct {
		c    Config
		want string
	}{
		{Config{Kind: Interleaved, PP: 4, VPP: 2, Micro: 2}, "at least pp=4 micro-batches, got 2"},
		{Config{Kind: Interleaved, PP: 4, VPP: 2, Micro: 6}, "micro-batches=6 to be a multiple of pp=4"},
		{Config{Kind: OneFOneB, PP: 2, VPP: 2, Micro: 4}, "vpp=2 needs schedule=interleaved"},
		{Config{Kind: "dualpipe", PP: 2, Micro: 4}, `schedule="dualpipe"`},
		{Config{Kind: DualPipeV, PP: 2, Micro: 3}, "schedule=dualpipev needs micro-batches >= 2·pp = 4"},
		{Config{Kind: DualPipeV, PP: 4, Micro: 7}, "schedule=dualpipev needs micro-batches >= 2·pp = 8"},
		{Config{Kind: DualPipeV, PP: 1, Micro: 4}, "schedule=dualpipev needs pp >= 2"},
		{Config{Kind: DualPipeV, PP: 2, VPP: 3, Micro: 4}, "schedule=dualpipev holds 2 chunks per rank"},
		{Config{Kind: GPipe, PP: 0, Micro: 4}, "pp=0"},
		{Config{Kind: GPipe, PP: 2, Micro: 0}, "micro-batches=0"},
	}
	for _, tc := range cases {
		_, err := Build(tc.c)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%+v: error %v, want one line with %q", tc.c, err, tc.want)
		}
	}
}

// TestFewMicroBatches: 1f1b and zb-h1 with fewer micro-batches than stages
// still run (warm-up capped), with the textbook bubble.
func TestFewMicroBatches(t *testing.T) {
	for _, k := range []Kind{GPipe, OneFOneB, ZBH1} {
		c := Config{Kind: k, PP: 4, Micro: 2}
		s, err := Build(c)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Simulate(s, Unit)
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		for r, n := range res.InFlight {
			if n != PeakInFlight(c, r) {
				t.Errorf("%s rank %d: %d in flight, want %d", k, r, n, PeakInFlight(c, r))
			}
		}
	}
}

// Replaying durations: equal ones give Simulate's unit result; a slow
// rank's passes stretch the other's idle time.
func TestReplay(t *testing.T) {
	s, err := Build(Config{Kind: OneFOneB, PP: 2, Micro: 4})
	if err != nil {
		t.Fatal(err)
	}
	spans := func(slow int64) [][]trace.Event {
		out := make([][]trace.Event, 2)
		for r, acts := range s.Ranks {
			for _, a := range acts {
				if !a.Op.Compute() {
					continue
				}
				d := int64(1)
				if a.Op == Backward {
					d = 2
				}
				if r == 1 {
					d *= slow
				}
				out[r] = append(out[r], trace.Event{Name: fmt.Sprintf("%v mb%d c%d", a.Op, a.MB, a.Chunk), Dur: d})
			}
		}
		return out
	}
	res, err := Replay(s, spans(1), Wire{})
	if err != nil {
		t.Fatal(err)
	}
	unit, _ := Simulate(s, Unit)
	if res.Makespan != unit.Makespan || math.Abs(res.MeanIdle()-unit.Bubble()) > 1e-12 {
		t.Fatalf("replay of unit durations: makespan %d idle %v, Simulate %d %v", res.Makespan, res.MeanIdle(), unit.Makespan, unit.Bubble())
	}
	slow, err := Replay(s, spans(2), Wire{})
	if err != nil {
		t.Fatal(err)
	}
	if slow.Busy[1] != 2*slow.Busy[0] || slow.MeanIdle() <= res.MeanIdle() {
		t.Fatalf("a rank twice as slow: busy %v, idle %v (equal ranks %v)", slow.Busy, slow.MeanIdle(), res.MeanIdle())
	}
	if _, err := Replay(s, [][]trace.Event{{{Name: "step 1"}}}, Wire{}); err == nil {
		t.Fatal("a span that is no action replayed")
	}
	wired, err := Replay(s, spans(1), Wire{Latency: 1})
	if err != nil {
		t.Fatal(err)
	}
	if wired.Makespan <= res.Makespan || wired.MeanIdle() <= res.MeanIdle() {
		t.Fatalf("a wire's latency: makespan %d idle %v, without %d %v", wired.Makespan, wired.MeanIdle(), res.Makespan, res.MeanIdle())
	}
}

// SimulateLink by hand: GPipe, p = 2, m = 2, F = 1, B+W = 2. With latency
// 10 and no gap, each message arrives 10 after it is sent; with gap 5 and
// no latency, the second message of a direction queues behind the first.
func TestSimulateLink(t *testing.T) {
	s, err := Build(Config{Kind: GPipe, PP: 2, Micro: 2})
	if err != nil {
		t.Fatal(err)
	}
	unit := func(_ int, a Action) int64 {
		if a.Op == Forward {
			return 1
		}
		return 2
	}
	for _, c := range []struct {
		w    Wire
		want int64
	}{
		// rank 0: F0 0–1, F1 1–2; acts arrive at 11, 12. Rank 1: F0 11–12,
		// F1 12–13, B0 13–15, B1 15–17; grads arrive 25, 27. Rank 0: B0
		// 25–27, B1 27–29.
		{Wire{Latency: 10}, 29},
		// acts leave at 1 and 6 (queued), arrive 6 and 11. Rank 1: F0 6–7,
		// F1 11–12, B0 12–14, B1 14–16; grads arrive 19, then 24 (queued).
		// Rank 0: B0 19–21, B1 24–26.
		{Wire{Gap: 5}, 26},
		{Wire{}, 9},
	} {
		res, err := SimulateLink(s, unit, c.w)
		if err != nil {
			t.Fatal(err)
		}
		if res.Makespan != c.want {
			t.Errorf("wire %+v: makespan %d, want %d", c.w, res.Makespan, c.want)
		}
	}
}
