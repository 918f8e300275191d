package profile

import (
	"math"
	"testing"

	"trellis/ops"
	"trellis/plan"
)

// TestFitGEMMRecovers: timings made from the planner's own model with
// known η_max and κ (and ±2% noise) give them back.
func TestFitGEMMRecovers(t *testing.T) {
	const peak = 200e9
	for _, c := range []struct{ eff, knee float64 }{{0.9, 24}, {0.6, 128}, {0.75, 4}} {
		var ss []GEMMSample
		i := 0
		for _, m := range []int{8, 16, 32, 64, 128, 256, 512, 1024} {
			for _, n := range []int{64, 768, 3072} {
				s := GEMMSample{M: m, N: n, K: 768}
				noise := 1 + 0.02*math.Sin(float64(i))
				i++
				s.Seconds = s.FLOPs() / (peak * c.eff * gemmShape(s, c.knee)) * noise
				ss = append(ss, s)
			}
		}
		eff, knee, rms, err := FitGEMM(ss, peak)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(eff/c.eff-1) > 0.03 || math.Abs(knee/c.knee-1) > 0.1 || rms > 0.03 {
			t.Errorf("want η=%g κ=%g: got η=%.4g κ=%.4g rms=%.3g", c.eff, c.knee, eff, knee, rms)
		}
	}
	if _, _, _, err := FitGEMM(nil, 1); err == nil {
		t.Error("no samples: want an error")
	}
}

// TestFitLinkRecovers: collective timings from the planner's ring model
// with known α and β give them back, for all-reduce, reduce-scatter and
// all-gather together, and the clamp keeps α ≥ 0.
func TestFitLinkRecovers(t *testing.T) {
	for _, c := range []struct{ alpha, bw float64 }{{20e-6, 5e9}, {1e-6, 40e9}, {0, 1e9}} {
		var ss []CommSample
		i := 0
		for _, op := range []string{"allreduce", "reducescatter", "allgather"} {
			for _, n := range []int{2, 4} {
				for _, S := range []int64{4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20} {
					s := CommSample{Op: op, Ranks: n, Bytes: S}
					a, b, _ := s.terms()
					s.Seconds = (a*c.alpha + b/c.bw) * (1 + 0.01*math.Cos(float64(i)))
					i++
					ss = append(ss, s)
				}
			}
		}
		alpha, bw, rms, err := FitLink(ss)
		if err != nil {
			t.Fatal(err)
		}
		if alpha < 0 || math.Abs(alpha-c.alpha) > 0.05*c.alpha+0.2e-6 || math.Abs(bw/c.bw-1) > 0.03 || rms > 0.02 {
			t.Errorf("want α=%g β=%g: got α=%.4g β=%.4g rms=%.3g", c.alpha, c.bw, alpha, bw, rms)
		}
	}
	if _, _, _, err := FitLink([]CommSample{{Op: "allreduce", Ranks: 1, Bytes: 4, Seconds: 1}}); err == nil {
		t.Error("one rank only: want an error")
	}
}

// TestFitGEMMBounded: the GEMM samples of a Zen 3 host with AVX2 only
// (trellis profile --quick, 2026-12-02), whose large products reach the FMA
// loop's peak, fitted η = 1.1467 without the bound η ≤ 1, which the
// cluster file then refused ("a fraction of peak is at most 1").
func TestFitGEMMBounded(t *testing.T) {
	const peak = 77.6e9
	var ss []GEMMSample
	for _, r := range [][4]float64{
		{8, 3072, 768, 7.9}, {1024, 768, 8, 40.5}, {32, 3072, 768, 25.1}, {1024, 768, 32, 77.4},
		{128, 3072, 768, 54.0}, {1024, 768, 128, 73.7}, {1024, 3072, 768, 73.9}, {1024, 768, 1024, 71.0},
		{1024, 64, 1024, 52.2}, {1024, 768, 3072, 61.3}, {256, 384, 128, 77.6}, {256, 512, 128, 74.6},
		{256, 128, 512, 65.3}, {128, 512, 256, 65.6}, {512, 768, 256, 68.9},
	} {
		s := GEMMSample{M: int(r[0]), N: int(r[1]), K: int(r[2])}
		s.Seconds = s.FLOPs() / (r[3] * 1e9)
		ss = append(ss, s)
	}
	eff, knee, _, err := FitGEMM(ss, peak)
	if err != nil {
		t.Fatal(err)
	}
	if eff > 1 || eff < 0.5 || knee <= 0 {
		t.Errorf("η=%.4g κ=%.4g: want 0.5 <= η <= 1", eff, knee)
	}
}

// TestMemMixIsTheLayersTime: mem_efficiency prices a GPT layer's
// memory-bound bytes (norms 4h, residual adds 6h, GELU 8h a token) at
// the time the three kernels take for them, not at the slowest kernel's
// rate (which priced the adds and norms at GELU's and every memory-bound
// pass 1.5–2× slow).
func TestMemMixIsTheLayersTime(t *testing.T) {
	norm, add, act := 30.0, 36.0, 20.0
	got := mixGBps(norm, add, act)
	want := 18 / (4/norm + 6/add + 8/act)
	if math.Abs(got/want-1) > 1e-12 {
		t.Fatalf("mix at %g, %g, %g GB/s: got %g, want %g", norm, add, act, got, want)
	}
	if got <= min(norm, add, act) || got >= max(norm, add, act) {
		t.Errorf("mix %g GB/s must lie between the slowest and the fastest kernel", got)
	}
	if g := mixGBps(25, 25, 25); math.Abs(g-25) > 1e-12 {
		t.Errorf("equal rates 25 GB/s: mix %g", g)
	}
}

// TestHandoffIsBoundedByBackToBack: the hand-off's fit recovers the α
// and β of its samples where they are slower than the back-to-back link,
// and never prices a collective between computing ranks cheaper than one
// between ranks that wait for nothing (a quick profile once wrote
// latency_us = 0, and the planner then priced every collective at
// bandwidth alone).
func TestHandoffIsBoundedByBackToBack(t *testing.T) {
	l := Link{Backend: "local", Ranks: 2, LatencyS: 5e-6, BWBytes: 8e9}
	at := func(alpha, bw float64) Handoff {
		var h Handoff
		for _, b := range handoffSizes() {
			h.Samples = append(h.Samples, CommSample{Op: "allreduce", Ranks: 2, Bytes: b, Seconds: 2*alpha + float64(b)/bw})
		}
		if err := h.fit(l); err != nil {
			t.Fatal(err)
		}
		return h
	}
	if h := at(18e-6, 6e9); math.Abs(h.LatencyS/18e-6-1) > 1e-9 || math.Abs(h.BWBytes/6e9-1) > 1e-9 || h.RMS > 1e-9 {
		t.Errorf("hand-off of α 18 µs, β 6 GB/s: fit %g s, %g B/s, RMS %g", h.LatencyS, h.BWBytes, h.RMS)
	}
	if h := at(1e-6, 20e9); h.LatencyS != l.LatencyS || h.BWBytes != l.BWBytes {
		t.Errorf("hand-off faster than back to back: fit %g s, %g B/s, want the back-to-back %g s, %g B/s", h.LatencyS, h.BWBytes, l.LatencyS, l.BWBytes)
	}
}

// TestFlashTiledRuleIsThePlanners: the head sizes the planner prices at
// attn_narrow_efficiency (plan.FlashHeadTiled false) are those the
// kernels run on the blocked path, where they have a tiled one.
func TestFlashTiledRuleIsThePlanners(t *testing.T) {
	k, err := ops.New(ops.Config{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !k.FlashTiled(64) {
		t.Skipf("kernels %s have no tiled flash path: every head size runs one path", k.ISA())
	}
	for hs := 8; hs <= 256; hs += 8 {
		if k.FlashTiled(hs) != plan.FlashHeadTiled(hs) {
			t.Errorf("head size %d: kernels tiled=%v, planner %v", hs, k.FlashTiled(hs), plan.FlashHeadTiled(hs))
		}
	}
}
