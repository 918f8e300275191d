package profile

import (
	"bytes"
	"context"
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"

	"trellis/comm/local"
	"trellis/ops"
	"trellis/plan"
)

// TestQuickProfileIsAClusterFile runs the quick profile on this machine
// (local collectives only) and checks that what it writes is a valid
// cluster file whose device and links carry the measured numbers.
func TestQuickProfileIsAClusterFile(t *testing.T) {
	if testing.Short() {
		t.Skip("measures the machine for several seconds")
	}
	r, err := Run(context.Background(), Config{Quick: true, Backends: []string{"local"}, Ranks: 2})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := r.WriteTOML(&b); err != nil {
		t.Fatal(err)
	}
	c, err := plan.ParseClusterFile(b.Bytes())
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if c.DevicesPerNode < 1 || !(c.Accel.Peak[plan.FP32] > 0) || !(c.Intra.BW > 0) || c.Intra != c.Inter {
		t.Fatalf("cluster %+v from\n%s", c, b.String())
	}
	if want := clamp01(r.Ring.PlannerEffOut); !(c.Accel.RingAttnEff > 0) || math.Abs(c.Accel.RingAttnEff-want) > 5e-5 || r.Ring.Shapes[0].Tile != r.Attention.T/4 {
		t.Errorf("ring_attn_efficiency %g, want the ring sample's %g (tiles of %d rows at T=%d)", c.Accel.RingAttnEff, want, r.Ring.Shapes[0].Tile, r.Attention.T)
	}
	if math.Abs(c.Accel.RingTileGap-r.Ring.TileSeconds) > 1e-9 {
		t.Errorf("ring_tile_us %g µs, want the fit's %g", c.Accel.RingTileGap*1e6, r.Ring.TileSeconds*1e6)
	}
	checkAttnTable(t, c.Accel.Attn, r.AttnTable)
	// Two ranks poll their waits where the process has two cores: the
	// file's intra link is then the blocking hand-off and its polled_
	// keys the polled one's fit.
	if h := r.Handoff; h == nil || math.Abs(c.Intra.Latency-h.LatencyS) > 1e-9 {
		t.Errorf("intra.latency_us %g, want the blocking hand-off's %+v", c.Intra.Latency*1e6, h)
	}
	switch ph := r.PolledHandoff; {
	case (local.PollFor(2, runtime.GOMAXPROCS(0)) > 0) != (ph != nil):
		t.Errorf("polled hand-off %+v with GOMAXPROCS %d", ph, runtime.GOMAXPROCS(0))
	case ph == nil && c.PolledIntra != nil:
		t.Errorf("intra.polled_* %+v without a polled hand-off", c.PolledIntra)
	case ph != nil && (c.PolledIntra == nil || math.Abs(c.PolledIntra.Latency-ph.LatencyS) > 1e-9 || math.Abs(c.PolledIntra.BW-ph.BWBytes)/ph.BWBytes > 1e-3):
		t.Errorf("intra.polled_* %+v, want the polled hand-off's α %g, β %g", c.PolledIntra, ph.LatencyS, ph.BWBytes)
	}
	for _, g := range r.GEMM {
		if e := g.Efficiency(r.PeakFLOPs); e > 1 {
			t.Errorf("GEMM %dx%dx%d at %.2f of the peak: the peak must bound every product", g.M, g.N, g.K, e)
		}
	}
}

// checkAttnTable: the cluster file's [device.attention] is the measured
// table (to its written 0.001 ns): at every timed shape the planner's
// cost per score is the timing the profile took there.
func checkAttnTable(t *testing.T, got *plan.AttnTable, want plan.AttnTable) {
	t.Helper()
	if got == nil || len(got.Seq) != len(want.Seq) || len(got.Head) != len(want.Head) {
		t.Fatalf("device.attention %+v, want the measured grid %v × %v", got, want.Seq, want.Head)
	}
	for k := range want.Cost {
		for i, T := range want.Seq {
			for j, d := range want.Head {
				w := want.Cost[k][i][j]
				if g := got.Score(k, T, d); math.Abs(g-w) > 0.6e-12 || !(w > 0) {
					t.Errorf("%s at T %d d %d: %g ns per score, want the timing's %g", plan.AttnTableKey(k), T, d, g*1e9, w*1e9)
				}
			}
		}
	}
}

func TestConfigRefuses(t *testing.T) {
	for _, c := range []Config{{Threads: -1}, {Ranks: 1}, {Backends: []string{"mpi"}}, {Backends: []string{"tcp"}}} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: want an error", c)
		}
	}
}

// The attention sample is the table's point at its shape (quick: T 256,
// full: T 1,024, head size 64), both of which the table times; a table
// without it is an error, not a zero efficiency.
func TestAttentionSampleIsTheTables(t *testing.T) {
	for _, quick := range []bool{true, false} {
		s := AttnSample{T: 1024}
		if quick {
			s.T = 256
		}
		if !slices.Contains(attnTableSeq(), s.T) || !slices.Contains(attnTableHead(), 64) {
			t.Errorf("quick=%v: the table's grid %v × %v lacks T=%d, head size 64", quick, attnTableSeq(), attnTableHead(), s.T)
		}
	}
	tab := plan.AttnTable{Seq: []int{256}, Head: []int{64}}
	for k := range tab.Cost {
		tab.Cost[k] = [][]float64{{float64(k+1) * 1e-9}}
	}
	s, err := measureAttention(Config{Quick: true}, tab, 1e11)
	if n := causalScores(256); err != nil || !(math.Abs(s.Fwd-1e-9*n) < 1e-15) || !(math.Abs(s.Bwd-2e-9*n) < 1e-15) || !(s.PlannerEffOut > 0) {
		t.Errorf("from the table: %+v, %v; want fwd %g s, bwd %g s", s, err, 1e-9*n, 2e-9*n)
	}
	if _, err := measureAttention(Config{}, tab, 1e11); err == nil || !strings.Contains(err.Error(), "lacks T=1024") {
		t.Errorf("a table without T=1024: %v, want an error naming it", err)
	}
	// The narrow heads' sample is the table's head-size-16 point too,
	// where the kernels tile 64 but not 16.
	k, err := ops.New(ops.Config{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(attnTableHead(), 16) {
		t.Errorf("the table's head sizes %v lack 16", attnTableHead())
	}
	tab = plan.AttnTable{Seq: []int{256}, Head: []int{16, 64}}
	for k := range tab.Cost {
		tab.Cost[k] = [][]float64{{float64(k+3) * 1e-9, float64(k+1) * 1e-9}}
	}
	ns, err := measureNarrowAttention(k, tab, 1e11, s)
	switch n := causalScores(256); {
	case err != nil:
		t.Errorf("narrow: %v", err)
	case k.FlashTiled(64) && !k.FlashTiled(16) && (ns == nil || math.Abs(ns.Fwd-3e-9*n) > 1e-15 || math.Abs(ns.Bwd-4e-9*n) > 1e-15 || ns.C/ns.NH != 16):
		t.Errorf("narrow from the table: %+v; want head size 16, fwd %g s, bwd %g s", ns, 3e-9*n, 4e-9*n)
	case (!k.FlashTiled(64) || k.FlashTiled(16)) && ns != nil:
		t.Errorf("narrow %+v where every head size runs one path", ns)
	}
}
