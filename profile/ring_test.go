package profile

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"trellis/ops"
	"trellis/plan"
)

// WriteTOML writes the ring tiles' efficiency as ring_attn_efficiency
// beside the flash kernel's attn_efficiency, and the planner reads both.
func TestWriteTOMLRingAttnEfficiency(t *testing.T) {
	r := &Result{CPU: "test", Cores: 2, MemTotalBytes: 8 << 30, ISA: "generic", Threads: 1, PeakFLOPs: 100e9,
		GEMMEff: 0.8, GEMMKnee: 16, CoreSpeedup: 2,
		Attention: AttnSample{B: 1, T: 256, C: 256, NH: 4, Fwd: 1e-3, Bwd: 2e-3, PlannerEffOut: 0.5},
		Ring: RingSample{Shapes: []RingTiming{{B: 1, T: 256, C: 256, NH: 4, Tile: 64, Tiles: 20, Fwd: 2e-3, Bwd: 4e-3}},
			PlannerEffOut: 0.1234, TileSeconds: 4.5e-6},
		Memory: MemSample{CopyGBps: 10, KernelGBps: 5},
		Links:  []Link{{Backend: "local", Ranks: 2, LatencyS: 1e-6, BWBytes: 1e9}}}
	var b bytes.Buffer
	if err := r.WriteTOML(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "ring_attn_efficiency = 0.1234   # with ring_tile_us") || !strings.Contains(b.String(), "ring_tile_us = 4.500\n") {
		t.Errorf("no ring_attn_efficiency line in\n%s", b.String())
	}
	c, err := plan.ParseClusterFile(b.Bytes())
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if c.Accel.RingAttnEff != 0.1234 || c.Accel.AttnEff != 0.5 || math.Abs(c.Accel.RingTileGap-4.5e-6) > 1e-15 {
		t.Errorf("read ring_attn_efficiency %g, attn_efficiency %g, ring_tile_us %g µs; want 0.1234, 0.5, 4.5", c.Accel.RingAttnEff, c.Accel.AttnEff, c.Accel.RingTileGap*1e6)
	}
}

// measureRing times a cp=2 rank's tiles at the attention sample's shape
// and a small one, counting the planner's FLOPs of the rank (half the
// sequence's causal triangle) and its tiles; the tiles' forward leaves
// out/l the attention of the rank's query chunks (checked against the
// materialising kernel on chunk 3's rows).
func TestMeasureRing(t *testing.T) {
	k, err := ops.New(ops.Config{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	a := AttnSample{B: 2, T: 64, C: 32, NH: 2}
	s, err := measureRing(context.Background(), Config{Quick: true}, k, 100e9, a)
	if err != nil {
		t.Fatal(err)
	}
	g := s.Shapes[0]
	if len(s.Shapes) != 2 || g.Tile != 16 || g.Tiles != 20 || !(g.Fwd > 0) || !(g.Bwd > 0) || s.Shapes[1].Tile != 32 || !(s.PlannerEffOut > 0) || s.TileSeconds < 0 {
		t.Fatalf("sample %+v", s)
	}
	if want := 4.0 * 4 * 32 * 64 * 16 * 0.5; g.FlopsForward != want {
		t.Errorf("FLOPs %g, want %g", g.FlopsForward, want)
	}
	r := newRingRank(k, rand.New(rand.NewPCG(1, 2)), g)
	r.qkv = make([]float32, len(r.qkv))
	for i := range r.qkv {
		r.qkv[i] = float32(math.Sin(float64(i)))
	}
	r.forward()
	want, att := make([]float32, len(r.out)), make([]float32, a.B*a.NH*a.T*a.T)
	k.AttentionForward(want, att, r.qkv, a.B, a.T, a.C, a.NH, a.NH)
	for b := 0; b < a.B; b++ {
		for i := 3 * g.Tile; i < a.T; i++ {
			for x := 0; x < a.C; x++ {
				h := x / (a.C / a.NH)
				o := (b*a.T+i)*a.C + x
				if got := r.out[o] / r.l[(b*a.NH+h)*a.T+i]; math.Abs(float64(got-want[o])) > 1e-5 {
					t.Fatalf("b=%d row %d col %d: %g, want %g", b, i, x, got, want[o])
				}
			}
		}
	}
}

// fitRing recovers η and γ from timings made with the planner's own
// formula, and falls back to η of the first timing, γ = 0, when the two
// disagree in sign (a small shape timed faster per FLOP than a large one).
func TestFitRing(t *testing.T) {
	const peak, eff, gam = 200e9, 0.6, 5e-6
	mk := func(B, T, C, NH int) RingTiming {
		g := RingTiming{B: B, T: T, C: C, NH: NH, Tile: T / 4, Tiles: B * NH * 5}
		g.FlopsForward = 4 * float64(B*NH) * float64(T/2) * float64(T) * float64(C/NH) * 0.5
		sec := g.FlopsForward*(1+2.5/0.8)/(eff*peak) + float64(g.Tiles)*gam
		g.Fwd, g.Bwd = sec/4, 3*sec/4
		return g
	}
	big, small := mk(1, 256, 256, 4), mk(2, 128, 128, 4)
	e, g := fitRing([]RingTiming{big, small}, peak)
	if math.Abs(e/eff-1) > 1e-9 || math.Abs(g/gam-1) > 1e-9 {
		t.Errorf("fit η=%g γ=%g, want %g, %g", e, g, eff, gam)
	}
	small.Fwd, small.Bwd = small.Fwd/10, small.Bwd/10
	e, g = fitRing([]RingTiming{big, small}, peak)
	if want := big.FlopsForward * (1 + 2.5/0.8) / peak / (big.Fwd + big.Bwd); g != 0 || math.Abs(e/want-1) > 1e-12 {
		t.Errorf("inconsistent timings: η=%g γ=%g, want %g, 0", e, g, want)
	}
}
