package plan

import (
	"fmt"
	"strings"
	"testing"
)

// stepWith evaluates plan text on job j with the cluster's software
// replaced by s.
func stepWith(t *testing.T, j Job, s Software, plan string) Time {
	t.Helper()
	j.Cluster.Software = s
	p, err := Parse(plan)
	if err != nil {
		t.Fatal(err)
	}
	e, err := j.Evaluate(p)
	if err != nil {
		t.Fatalf("%s: %v", plan, err)
	}
	return e.Time
}

// TestZeRO3StrongScalingStops is the published shape of ZeRO-3 at scale: a
// fixed global batch over more and more devices, down to one micro-batch
// each. Costed as the ideal framework (hierarchical collectives) the step
// keeps falling with the compute up to thousands of devices; with NCCL's
// flat rings every per-layer gather pays (n−1)·α and the step stops
// falling while the compute still halves per doubling.
func TestZeRO3StrongScalingStops(t *testing.T) {
	step := func(s Software, n int) Time {
		j := job(t, "llama3-8b", "dgx-h100", n, 4096, 8192)
		return stepWith(t, j, s, fmt.Sprintf("dp=%d,zero=3,mbs=1,recompute=full", n))
	}
	ideal, flat := Software{}, Software{FlatRings: true}
	if a, b := step(ideal, 256).Step, step(ideal, 1024).Step; a/b < 3.5 {
		t.Errorf("hierarchical: 256 → 1024 devices speeds the step up %.2f×, want near 4×", a/b)
	}
	a, b := step(flat, 1024), step(flat, 8192)
	if a.Compute/b.Compute < 7.9 {
		t.Fatalf("compute 1024 → 8192 devices falls %.2f×, want 8×", a.Compute/b.Compute)
	}
	if a.Step/b.Step > 1.5 {
		t.Errorf("flat rings: 1024 → 8192 devices speeds the step up %.2f× (%.3f → %.3f s), want it to stop falling",
			a.Step/b.Step, a.Step, b.Step)
	}
	if b.CommExposed < b.Compute {
		t.Errorf("flat rings at 8192: exposed comm %.3f s below compute %.3f s", b.CommExposed, b.Compute)
	}
}

// TestZeRO3GatherGranularity: gathering each of a layer's four linear
// modules separately pays four latencies where one layer-wide gather pays
// one (the bytes are the same), and a regather under full recomputation
// adds a gather to the backward; neither changes a plan without ZeRO-3 or
// (regather) without full recomputation.
func TestZeRO3GatherGranularity(t *testing.T) {
	j := job(t, "llama3-8b", "dgx-h100", 1024, 4096, 1024)
	const z3 = "dp=1024,zero=3,mbs=1,recompute=full"
	base := stepWith(t, j, Software{FlatRings: true}, z3)
	mods := stepWith(t, j, Software{FlatRings: true, ZeRO3Modules: 4}, z3)
	regather := stepWith(t, j, Software{FlatRings: true, ZeRO3Regather: true}, z3)
	post := stepWith(t, j, Software{FlatRings: true, ZeRO3BackwardPost: true}, z3)
	if !(mods.CommExposed > base.CommExposed) || !(regather.CommExposed > base.CommExposed) || !(post.CommExposed > base.CommExposed) {
		t.Errorf("exposed comm: per layer %.4f, per module %.4f, regather %.4f, backward-post %.4f; want the last three above the first",
			base.CommExposed, mods.CommExposed, regather.CommExposed, post.CommExposed)
	}
	for _, plan := range []string{"dp=1024,zero=1,mbs=1,recompute=full", "dp=1024,zero=3,mbs=1,recompute=none"} {
		a := stepWith(t, j, Software{FlatRings: true}, plan)
		b := stepWith(t, j, Software{FlatRings: true, ZeRO3Regather: true}, plan)
		if strings.Contains(plan, "zero=1") {
			b = stepWith(t, j, Software{FlatRings: true, ZeRO3Regather: true, ZeRO3BackwardPost: true}, plan)
		}
		if a != b {
			t.Errorf("%s: regather changed the step %.6f → %.6f", plan, a.Step, b.Step)
		}
	}
	a := stepWith(t, j, Software{}, "dp=1024,zero=1,mbs=1")
	b := stepWith(t, j, Software{ZeRO3Modules: 4}, "dp=1024,zero=1,mbs=1")
	if a != b {
		t.Errorf("zero=1: per-module gathers changed the step %.6f → %.6f", a.Step, b.Step)
	}
}

// TestFlatRingCost holds flatRing to its formula and to its trade against
// the hierarchical schedule: one pipelined ring moves a large buffer faster
// (NVLink and the rails work at once, not one after the other) and a small
// one slower (n−1 inter-node latencies, not k−1 + nodes−1).
func TestFlatRingCost(t *testing.T) {
	c, err := ClusterPreset("dgx-a100")
	if err != nil {
		t.Fatal(err)
	}
	g := group{n: 64, k: 8}
	S := 1e9
	want := 63*c.Inter.Latency + 63.0/64*S/(8*c.Inter.BW)
	if got := c.flatRing(S, g); !relNear(got, want, 1e-12) {
		t.Errorf("flat ring %.6g, want %.6g", got, want)
	}
	flat, hier := c, c
	flat.Software.FlatRings, hier.Software.FlatRings = true, false
	big, small := group{n: 64, k: 8}, group{n: 1024, k: 8}
	if f, h := flat.allGather(1e10, big), hier.allGather(1e10, big); !(f < h) {
		t.Errorf("10 GB over 64 ranks: flat %.4g s, hierarchical %.4g s; want flat faster", f, h)
	}
	if f, h := flat.allGather(1e4, small), hier.allGather(1e4, small); !(f > 5*h) {
		t.Errorf("10 kB over 1024 ranks: flat %.4g s, hierarchical %.4g s; want flat latency-bound", f, h)
	}
}

func relNear(a, b, rel float64) bool { return a == b || (a-b)/b < rel && (b-a)/b < rel }

// TestTPGradOverlap: Megatron's asynchronous backward hides the
// column-parallel input-gradient collectives behind the dW GEMMs, so the
// exposed tensor-parallel time falls, but never below the forward's (which
// nothing overlaps), with and without sp.
func TestTPGradOverlap(t *testing.T) {
	j := job(t, "megatron-175b", "dgx-a100", 64, 2048, 64)
	for _, plan := range []string{"tp=8,pp=8,mbs=1,recompute=full,flash=off", "tp=8,pp=8,mbs=1,sp=on,recompute=selective,flash=off"} {
		off := stepWith(t, j, Software{}, plan)
		on := stepWith(t, j, Software{TPGradOverlap: true}, plan)
		passes := 2.0
		if strings.Contains(plan, "full") {
			passes = 3
		}
		fwdOnly := off.TP * (passes - 1) / passes
		if !(on.TP < off.TP) || on.TP < fwdOnly*(1-1e-9) {
			t.Errorf("%s: exposed TP %.4f s with overlap, %.4f without; the forward alone is %.4f", plan, on.TP, off.TP, fwdOnly)
		}
	}
}

// TestSoftwareClusterKeys: the software profile's file keys set the
// fields, and an out-of-range value is refused naming the key.
func TestSoftwareClusterKeys(t *testing.T) {
	c, err := ParseClusterFile([]byte("base = \"dgx-a100\"\ntp_grad_overlap = true\nflat_rings = false\nzero3_modules = 4\nzero3_regather = true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Software{TPGradOverlap: true, ZeRO3Modules: 4, ZeRO3Regather: true}); c.Software != want {
		t.Errorf("software %+v, want %+v", c.Software, want)
	}
	_, err = ParseClusterFile([]byte("base = \"dgx-a100\"\nzero3_modules = -1\n"))
	if err == nil || !strings.Contains(err.Error(), "zero3_modules=-1") {
		t.Errorf("zero3_modules=-1: %v", err)
	}
	for _, name := range ClusterPresetNames() {
		p, _ := ClusterPreset(name)
		if !p.Software.FlatRings {
			t.Errorf("%s: presets run NCCL's flat rings", name)
		}
	}
}

// TestDeepSpeedPipelineEngine: blocking each send and receive separately
// doubles a synchronous schedule's exposed point-to-point time, and the
// separate fp32 gradient-accumulation pass adds a memory-bound pass over
// the stage's parameters per micro-batch in bf16 (none in fp16, whose
// gradients accumulate in autograd).
func TestDeepSpeedPipelineEngine(t *testing.T) {
	j := job(t, "megatron-530b", "dgx-a100", 280, 2048, 280)
	const plan = "tp=8,pp=35,mbs=1,recompute=full,flash=off"
	base := stepWith(t, j, Software{}, plan)
	blocking := stepWith(t, j, Software{PPBlockingP2P: true}, plan)
	if !relNear(blocking.PP, 2*base.PP, 1e-9) {
		t.Errorf("exposed p2p %.4f s blocking, %.4f s paired; want twice", blocking.PP, base.PP)
	}
	accum := stepWith(t, j, Software{GradAccumPass: true}, plan)
	p, _ := Parse(plan)
	sp := j.shapeParams(p)
	k := newKernels(j.Cluster.Accel, BF16)
	perMB := k.stream(sp.maxStage()*10, 1)
	m := float64(base.MicroBatches)
	if got := accum.Compute - base.Compute; got < 0.9*m*perMB || got > 1.1*m*perMB {
		t.Errorf("accumulation pass adds %.4f s of compute, want about m·P·10 bytes / bandwidth = %.4f s", got, m*perMB)
	}
	fp16 := plan + ",precision=fp16"
	if a, b := stepWith(t, j, Software{}, fp16), stepWith(t, j, Software{GradAccumPass: true}, fp16); a != b {
		t.Errorf("fp16: accumulation pass changed the step %.6f → %.6f", a.Step, b.Step)
	}
	c, err := ParseClusterFile([]byte("base = \"dgx-a100\"\npp_blocking_p2p = true\ngrad_accum_pass = true\n"))
	if err != nil || !c.Software.PPBlockingP2P || !c.Software.GradAccumPass {
		t.Errorf("pp_blocking_p2p, grad_accum_pass: %v %+v", err, c.Software)
	}
}
