package plan

import (
	"math"
	"strings"
	"testing"
)

// On a CPU host's goroutine ranks every collective pays the profiled
// hand-off whatever it is (comm/local: one rendezvous per collective): a
// reduce-scatter or all-gather on 2 ranks costs the all-reduce's latency
// 2(n−1)·α, where on a GPU node it costs the ring's (n−1)·α.
func TestHostCollectivesPayOneHandoffEach(t *testing.T) {
	j := hostJob(t, 2, 2, 2)
	c := j.Cluster
	g := group{n: 2, k: 2}
	const tiny = 8 // bytes: latency only
	if rs, ar := c.reduceScatter(tiny, g), c.allReduce(tiny, g); math.Abs(rs-ar) > 1e-3*ar {
		t.Errorf("host: reduce-scatter %g s, all-reduce %g s: want the same hand-off", rs, ar)
	}
	if ag := c.allGather(tiny, g); math.Abs(ag-2*c.Intra.Latency) > 1e-3*ag {
		t.Errorf("host: all-gather %g s, want 2·α = %g", ag, 2*c.Intra.Latency)
	}
	c.Cores = 0 // a GPU node: the ring
	if rs := c.reduceScatter(tiny, g); math.Abs(rs-c.Intra.Latency) > 1e-3*rs {
		t.Errorf("gpu node: reduce-scatter %g s, want α = %g", rs, c.Intra.Latency)
	}
}

// The engine's data-parallel reductions are its buckets, each a
// collective: more buckets, more hand-offs exposed on busy cores; without
// an engine layout the planner's one 40M-parameter bucket.
func TestHostReductionsCountEngineBuckets(t *testing.T) {
	j := hostJob(t, 2, 2, 2)
	one := hostStep(t, j, "dp=2,zero=1,mbs=2,precision=fp32,flash=off")
	j.Engine.Buckets = func(Plan, int) float64 { return 6 }
	six := hostStep(t, j, "dp=2,zero=1,mbs=2,precision=fp32,flash=off")
	// ZeRO-1: a reduce-scatter and an all-gather per bucket, each at
	// least the hand-off: 5 more buckets, at least 10 more hand-offs.
	if got, want := six.CommExposed-one.CommExposed, 10*j.Cluster.Intra.Latency; got < want*0.99 {
		t.Errorf("6 buckets expose %g s more than 1, want at least %g (10 hand-offs)", got, want)
	}
}

// A 16-bit plan on the engine runs only its linear GEMMs in 16 bits: it
// is faster than fp32 by less than the GEMMs' speed-up (the rest stays
// fp32, plus the conversion passes), and its non-GEMM work is not
// halved as a GPU's 16-bit activations would be.
func TestEngineHalfPlansPayTheirFP32Rest(t *testing.T) {
	j := hostJob(t, 1, 2, 2)
	j.Cluster.EngineStash = true
	j.Cluster.Accel.Peak[BF16] = 2 * j.Cluster.Accel.Peak[FP32]
	f32 := hostStep(t, j, "dp=1,mbs=2,precision=fp32,flash=off")
	b16 := hostStep(t, j, "dp=1,mbs=2,precision=bf16,flash=off")
	if !(b16.Compute < f32.Compute) || !(b16.Compute > f32.Compute/2*1.05) {
		t.Errorf("bf16 compute %g s against fp32's %g: want faster, but by less than the GEMMs' 2x", b16.Compute, f32.Compute)
	}
	p, _ := Parse("dp=1,mbs=2,precision=bf16,flash=off")
	k32 := newKernels(j.Cluster.Accel, FP32)
	if conv := j.engineHalfCompute(p, k32); !(conv.fwd > 0 && conv.bwd > 0) {
		t.Errorf("no conversion passes: %+v", conv)
	}
	j.Cluster.EngineStash = false // a GPU-style cluster: no engine terms
	if gpu := hostStep(t, j, "dp=1,mbs=2,precision=bf16,flash=off"); !(gpu.Compute < b16.Compute) {
		t.Errorf("without the engine, bf16 compute %g s; with it %g: want the engine's slower", gpu.Compute, b16.Compute)
	}
}

// The engine's conversion passes run at their own measured rate
// (convert_efficiency) where the cluster file gives one, and at
// mem_efficiency's where it does not: bytes / (mem_bw · rate) each.
func TestEngineConversionsAtTheirRate(t *testing.T) {
	j := hostJob(t, 1, 2, 2)
	j.Cluster.EngineStash = true
	p, _ := Parse("dp=1,mbs=2,precision=bf16,flash=off")
	at := func(conv float64) passTime {
		j.Cluster.Accel.ConvEff = conv
		return j.engineHalfCompute(p, newKernels(j.Cluster.Accel, FP32))
	}
	base, same, fast := at(0), at(j.Cluster.Accel.MemEff), at(2*j.Cluster.Accel.MemEff)
	if math.Abs(same.fwd/base.fwd-1) > 1e-12 || math.Abs(same.bwd/base.bwd-1) > 1e-12 {
		t.Errorf("convert_efficiency = mem_efficiency: %+v, want the default's %+v", same, base)
	}
	gap := 15 * j.Cluster.Accel.KernelGap // the 8 + 7 kernels' gaps do not scale
	if got, want := fast.fwd+fast.bwd-gap, (base.fwd+base.bwd-gap)/2; math.Abs(got/want-1) > 1e-9 {
		t.Errorf("at twice the rate the conversions' streaming takes %g s, want %g", got, want)
	}
	data := []byte("name = \"h\"\ndevices_per_node = 1\n[device]\nmemory_gib = 1\nmem_bw_gbps = 20\npeak_tflops = { fp32 = 0.1 }\nconvert_efficiency = 0.75\n[intra]\nbw_gbps = 1\n[inter]\nbw_gbps = 1\n")
	c, err := ParseClusterFile(data)
	if err != nil || c.Accel.ConvEff != 0.75 {
		t.Fatalf("convert_efficiency = 0.75: %v, %g", err, c.Accel.ConvEff)
	}
	if _, err := ParseClusterFile([]byte(strings.Replace(string(data), "0.75", "1.5", 1))); err == nil || !strings.Contains(err.Error(), "device.convert_efficiency") {
		t.Errorf("convert_efficiency = 1.5: want an error naming the key, got %v", err)
	}
}

// On an engine cluster that gives attn_narrow_efficiency, a head size
// the engine's flash cannot tile (16) is priced at it, a tiled one (32)
// at attn_efficiency; without the key, or off the engine, both at
// attn_efficiency.
func TestNarrowHeadsAtTheirFlashRate(t *testing.T) {
	j := hostJob(t, 1, 2, 2)
	p, _ := Parse("dp=1,mbs=2,precision=fp32,flash=on")
	j.Cluster.EngineStash = true
	a := &j.Cluster.Accel
	a.AttnNarrowEff = a.AttnEff / 4
	for _, c := range []struct {
		heads  int
		engine bool
		want   float64
	}{{8, true, a.AttnNarrowEff}, {4, true, a.AttnEff}, {8, false, a.AttnEff}} {
		j.Model.Heads, j.Model.KVHeads, j.Cluster.EngineStash = c.heads, c.heads, c.engine
		if got := j.attnEff(p); got != c.want {
			t.Errorf("head size %d, engine %v: efficiency %g, want %g", j.Model.HD(), c.engine, got, c.want)
		}
	}
	a.AttnNarrowEff = 0
	j.Model.Heads, j.Model.KVHeads, j.Cluster.EngineStash = 8, 8, true
	if got := j.attnEff(p); got != a.AttnEff {
		t.Errorf("no attn_narrow_efficiency: %g, want attn_efficiency %g", got, a.AttnEff)
	}
}
