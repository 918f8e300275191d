package pp

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"trellis/comm/local"
	"trellis/model"
	"trellis/precision"
	"trellis/trace"
)

// With a link far slower than the tiny model's passes every rank but the
// first waits on each activation, with a W whose B has run: the stages run
// W's ahead, and still give 1F1B's gradient bit for bit, one device's loss,
// and the static list's act peaks to the byte (stashes are freed at the
// W's place in the list, not when it ran).
func TestWeightsRunAhead(t *testing.T) {
	const m = 6
	for _, p := range []int{2, 4} {
		t.Run(fmt.Sprintf("pp%d", p), func(t *testing.T) {
			base := runPipeline(t, tiny, Config{Kind: OneFOneB, PP: p, Micro: m})
			c := Config{Kind: ZBH1, PP: p, Micro: m}
			slow := &local.LinkModel{Intra: local.Link{Latency: 3 * time.Millisecond}}
			o := runPipelineOn(t, tiny, c, local.Config{Size: p, Link: slow}, model.Options{})
			if o.ahead[p-1] == 0 {
				t.Errorf("no W ran ahead (per rank %v): the last rank waits ~3 ms for every activation with one W deferred", o.ahead)
			}
			if o.ahead[0] != 0 {
				t.Errorf("rank 0 ran %d W's ahead: its W's follow their B with no receive between", o.ahead[0])
			}
			if math.Abs(o.loss-base.loss) > 1e-6*math.Abs(base.loss) {
				t.Errorf("loss %.9g, 1f1b %.9g", o.loss, base.loss)
			}
			for i := range base.grad {
				if math.Float32bits(o.grad[i]) != math.Float32bits(base.grad[i]) {
					t.Fatalf("gradient %d = %v with W's run ahead %v, 1f1b %v", i, o.grad[i], o.ahead, base.grad[i])
				}
			}
			checkAct(t, tiny, c, o)
			t.Logf("W's run ahead per rank: %v", o.ahead)
		})
	}
}

// W's run ahead with full recomputation (W reruns its block's forward)
// and with bf16 GEMMs still give 1F1B's gradient bit for bit.
func TestWeightsRunAheadRecomputeHalf(t *testing.T) {
	const m = 6
	for _, mo := range []model.Options{{Recompute: model.RecomputeFull}, {Precision: precision.BF16()}, {Recompute: model.RecomputeSelective, Precision: precision.BF16()}} {
		t.Run(fmt.Sprintf("recompute%v/%v", mo.Recompute, mo.Precision), func(t *testing.T) {
			base := runPipelineOn(t, tiny, Config{Kind: OneFOneB, PP: 2, Micro: m}, local.Config{Size: 2}, mo)
			slow := &local.LinkModel{Intra: local.Link{Latency: 3 * time.Millisecond}}
			o := runPipelineOn(t, tiny, Config{Kind: ZBH1, PP: 2, Micro: m}, local.Config{Size: 2, Link: slow}, mo)
			if o.ahead[1] == 0 {
				t.Errorf("no W ran ahead (per rank %v)", o.ahead)
			}
			for i := range base.grad {
				if math.Float32bits(o.grad[i]) != math.Float32bits(base.grad[i]) {
					t.Fatalf("gradient %d = %v with W's run ahead %v, 1f1b %v", i, o.grad[i], o.ahead, base.grad[i])
				}
			}
		})
	}
}

// WithOrder takes the static order with movable actions moved earlier, in
// their order, and refuses any other order.
func TestWithOrder(t *testing.T) {
	s, err := Build(Config{Kind: ZBH1, PP: 2, Micro: 4})
	if err != nil {
		t.Fatal(err)
	}
	// rank 1: F0 B0 F1 B1 W0 F2 B2 W1 F3 B3 W2 W3
	parse := func(list string) []Action {
		var out []Action
		for _, f := range strings.Fields(list) {
			var a Action
			var op byte
			fmt.Sscanf(f, "%c%d", &op, &a.MB)
			a.Op = map[byte]Op{'F': Forward, 'B': Backward, 'W': Weight}[op]
			out = append(out, a)
		}
		return out
	}
	good := "F0 B0 F1 B1 W0 W1 F2 B2 W2 F3 B3 W3"
	got, err := s.WithOrder(1, parse(good))
	if err != nil {
		t.Fatalf("%s: %v", good, err)
	}
	if _, err := Simulate(got, Unit); err != nil {
		t.Fatalf("%s: %v", good, err)
	}
	if f := got.Format(); !strings.Contains(f, "rank 1: F0.0 B0.0 F1.0 B1.0 W0.0 W1.0 F2.0") {
		t.Errorf("reordered rank 1:\n%s", f)
	}
	for _, bad := range []string{
		"F0 B0 F1 B1 W1 W0 F2 B2 F3 B3 W2 W3", // movable out of order
		"F0 B0 F1 B1 F2 W0 B2 W1 F3 B3 W2 W3", // W0 later than its place
		"F0 B0 B1 F1 W0 F2 B2 W1 F3 B3 W2 W3", // fixed actions swapped
		"F0 B0 F1 B1 W0 F2 B2 W1 F3 B3 W2",    // one missing
		"F0 B0 F1 B1 W0 F2 B2 W1 F3 B3 W2 W2", // one repeated
	} {
		if _, err := s.WithOrder(1, parse(bad)); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
	// Replay follows the executed order the spans show.
	var spans [][]trace.Event
	for r, list := range []string{"F0 F1 B0 W0 F2 B1 W1 F3 B2 W2 B3 W3", good} {
		spans = append(spans, nil)
		for i, a := range parse(list) {
			spans[r] = append(spans[r], trace.Event{Name: fmt.Sprintf("%v mb%d c0", a.Op, a.MB), TS: int64(10 * i), Dur: 1})
		}
	}
	if _, err := Replay(s, spans, Wire{}); err != nil {
		t.Fatalf("replay of an executed order: %v", err)
	}
}

// Simulate runs movable W's ahead where a rank would wait longer than the
// W takes (rank 0's forwards are slow here), and only there: the static
// list's memory counts, a shorter or equal makespan, and at unit costs
// (no wait longer than a W) the static list's start times exactly.
func TestSimulateRunsAhead(t *testing.T) {
	s, err := Build(Config{Kind: ZBH1, PP: 2, Micro: 8})
	if err != nil {
		t.Fatal(err)
	}
	fixed := &Schedule{Config: s.Config}
	for _, acts := range s.Ranks {
		var out []Action
		for _, a := range acts {
			a.Movable = false
			out = append(out, a)
		}
		fixed.Ranks = append(fixed.Ranks, out)
	}
	slow := func(r int, a Action) int64 {
		switch {
		case a.Op == Forward && r == 0:
			return 10
		case a.Op.Compute():
			return 1
		}
		return 0
	}
	got, err := SimulateWith(s, slow)
	if err != nil {
		t.Fatal(err)
	}
	want, err := SimulateWith(fixed, slow)
	if err != nil {
		t.Fatal(err)
	}
	ahead := 0
	for i, a := range s.Ranks[1] {
		if a.Op == Weight && got.Start[1][i] < want.Start[1][i] {
			ahead++
		}
	}
	if ahead == 0 {
		t.Errorf("no W ran ahead on rank 1: starts %v, static %v", got.Start[1], want.Start[1])
	}
	if fmt.Sprint(got.InFlight, got.Deferred) != fmt.Sprint(want.InFlight, want.Deferred) {
		t.Errorf("in flight %v deferred %v, static list %v %v", got.InFlight, got.Deferred, want.InFlight, want.Deferred)
	}
	if got.Makespan > want.Makespan || got.Busy[1] != want.Busy[1] {
		t.Errorf("makespan %d busy %v, static list %d %v", got.Makespan, got.Busy, want.Makespan, want.Busy)
	}
	u, _ := Simulate(s, Unit)
	uf, _ := Simulate(fixed, Unit)
	if fmt.Sprint(u.Start) != fmt.Sprint(uf.Start) {
		t.Errorf("at unit costs the starts differ from the static list's:\n%v\n%v", u.Start, uf.Start)
	}
}

// Over each rank's own span (the first action to its last, as a trace's
// per-rank pipeline spans measure) 1F1B's last rank does not count its
// cooldown: at F = B = W and pp = 2 it idles F of 3m+1 and rank 0 idles
// 3 of 3m+3, so zb-h1 (1 of 3m+1 on both) is (m+1)/(2m+1) > 1/2 of 1F1B
// for every m; over the makespan it is (m+1)/(3m+1) (a third as m grows).
func TestOwnSpanBubble(t *testing.T) {
	for _, m := range []int{4, 8, 16, 64} {
		res := map[Kind]Result{}
		for _, k := range []Kind{OneFOneB, ZBH1} {
			s, err := Build(Config{Kind: k, PP: 2, Micro: m})
			if err != nil {
				t.Fatal(err)
			}
			if res[k], err = Simulate(s, Unit); err != nil {
				t.Fatal(err)
			}
		}
		a, z := res[OneFOneB], res[ZBH1]
		own, span := z.MeanOwnIdle()/a.MeanOwnIdle(), z.MeanIdle()/a.MeanIdle()
		if want := float64(m+1) / float64(2*m+1); math.Abs(own-want) > 1e-12 {
			t.Errorf("m=%d: zb-h1/1f1b over own spans %.4f, want (m+1)/(2m+1) = %.4f", m, own, want)
		}
		if want := float64(m+1) / float64(3*m+1); math.Abs(span-want) > 1e-12 {
			t.Errorf("m=%d: zb-h1/1f1b over the makespan %.4f, want (m+1)/(3m+1) = %.4f", m, span, want)
		}
	}
}
