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
		Ring:      RingSample{B: 1, T: 256, C: 256, NH: 4, Tile: 64, Fwd: 2e-3, Bwd: 4e-3, PlannerEffOut: 0.1234},
		Memory:    MemSample{CopyGBps: 10, KernelGBps: 5},
		Links:     []Link{{Backend: "local", Ranks: 2, LatencyS: 1e-6, BWBytes: 1e9}}}
	var b bytes.Buffer
	if err := r.WriteTOML(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "ring_attn_efficiency = 0.1234   # ring attention's tiles") {
		t.Errorf("no ring_attn_efficiency line in\n%s", b.String())
	}
	c, err := plan.ParseClusterFile(b.Bytes())
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if c.Accel.RingAttnEff != 0.1234 || c.Accel.AttnEff != 0.5 {
		t.Errorf("read ring_attn_efficiency %g, attn_efficiency %g; want 0.1234, 0.5", c.Accel.RingAttnEff, c.Accel.AttnEff)
	}
}

// measureRing times a cp=2 rank's tiles at the attention sample's shape,
// counts the planner's FLOPs of the rank (half the sequence's causal
// triangle) and converts the times as the planner prices them; the
// tiles' forward leaves out/l the attention of the rank's query chunks
// (checked against the materialising kernel on chunk 3's rows).
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
	if s.Tile != 16 || !(s.Fwd > 0) || !(s.Bwd > 0) {
		t.Fatalf("sample %+v", s)
	}
	if want := 4.0 * 4 * 32 * 64 * 16 * 0.5; s.FlopsForward != want {
		t.Errorf("FLOPs %g, want %g", s.FlopsForward, want)
	}
	if want := s.FlopsForward * (1 + 2.5/0.8) / (100e9 * (s.Fwd + s.Bwd)); math.Abs(s.PlannerEffOut/want-1) > 1e-12 {
		t.Errorf("efficiency %g, want %g", s.PlannerEffOut, want)
	}
	r := newRingRank(k, rand.New(rand.NewPCG(1, 2)), s)
	r.qkv = make([]float32, len(r.qkv))
	for i := range r.qkv {
		r.qkv[i] = float32(math.Sin(float64(i)))
	}
	r.forward()
	want, att := make([]float32, len(r.out)), make([]float32, a.B*a.NH*a.T*a.T)
	k.AttentionForward(want, att, r.qkv, a.B, a.T, a.C, a.NH, a.NH)
	for b := 0; b < a.B; b++ {
		for i := 3 * s.Tile; i < a.T; i++ {
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
