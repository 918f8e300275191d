package plan

import (
	"fmt"
	"strings"
	"testing"
)

// Megatron-Core's distributed-optimizer table (docs/user-guide/features/
// dist_optimizer.md): bytes per parameter without and with the optimizer
// sharded over d data-parallel ranks. bf16 keeps fp32 gradients (18, 6 +
// 12/d); fp32 (16, 8 + 8/d). fp16 follows ZeRO's 2 + 2 + 12 (Rajbhandari
// et al.), which Megatron exceeds by an fp32 copy of the gradients in its
// optimizer (its 20, 4 + 16/d): docs/PLANNER.md says so.
func TestModelStatesMegatronTable(t *testing.T) {
	const P, d = 1e9, 64
	for _, c := range []struct {
		prec           Precision
		plain, sharded float64
	}{
		{BF16, 18, 6 + 12.0/d},
		{FP8, 18, 6 + 12.0/d},
		{FP32, 16, 8 + 8.0/d},
		{FP16, 16, 4 + 12.0/d}, // ZeRO's; Megatron's table says 20 and 4 + 16/d
	} {
		for _, z := range []int{0, 1} {
			var mem Memory
			modelStates(&mem, P, Plan{DP: d, CP: 1, ZeRO: z, Precision: c.prec})
			want := c.plain
			if z == 1 {
				want = c.sharded
			}
			within(t, fmt.Sprintf("%s zero=%d bytes/param", c.prec, z), float64(mem.ModelStates())/P, want, 1e-9)
		}
	}
}

// Under sequence parallelism on a stack that overlaps them (the Hopper
// presets), tensor-parallel collectives hide behind their GEMMs, which run
// in tp chunks; across nodes, or on the A100 stack, they are exposed.
func TestTPCommOverlap(t *testing.T) {
	j := job(t, "llama3-70b", "dgx-h100", 64, 8192, 64)
	p := mustParse(t, "dp=8,tp=8,sp=on,recompute=full")
	pl := place(p, 8)
	on := j.layerCost(p, pl)
	off := j
	off.Cluster.TPCommOverlap = false
	plain := off.layerCost(p, pl)
	if !(on.tp < plain.tp/3) {
		t.Errorf("overlapped tp comm %.4f s should be a fraction of the exposed %.4f s", on.tp, plain.tp)
	}
	if !(on.compute.total() > plain.compute.total()) {
		t.Errorf("chunked GEMMs (%.4f s) should be slower than whole ones (%.4f s)", on.compute.total(), plain.compute.total())
	}
	if !(on.compute.total()+on.tp < plain.compute.total()+plain.tp) {
		t.Error("on balance the overlap should pay")
	}
	// A tensor group that spans nodes is not overlapped.
	wide := job(t, "llama3-70b", "dgx-h100", 64, 8192, 64)
	wide.Cluster.DevicesPerNode = 4
	if wide.tpOverlap(p, place(p, 4)) || !j.tpOverlap(p, pl) {
		t.Error("tp=8 overlaps inside an 8-GPU node only")
	}
	a := job(t, "llama3-70b", "dgx-a100", 64, 8192, 64)
	if a.tpOverlap(p, pl) || j.tpOverlap(mustParse(t, "dp=8,tp=8"), pl) {
		t.Error("no overlap on the A100 stack, nor without sp")
	}
}

// Without sequence parallelism every tensor rank sends the whole boundary
// activation (Megatron-Core, DeepSpeed); with it, 1/t of it.
func TestBoundaryBytes(t *testing.T) {
	j := job(t, "megatron-530b", "dgx-a100", 280, 2048, 280)
	full := j.boundaryBytes(mustParse(t, "tp=8,pp=35"))
	if want := 2048.0 * 20480 * 2; full != want {
		t.Errorf("sp=off: %g bytes, want T·h·e = %g", full, want)
	}
	if split := j.boundaryBytes(mustParse(t, "tp=8,pp=35,sp=on")); split != full/8 {
		t.Errorf("sp=on: %g bytes, want %g", split, full/8)
	}
}

// The fp32 cross-entropy moves e+36 bytes per logit forward and 12+e
// backward (Megatron's _VocabParallelCrossEntropy, pass by pass).
func TestCrossEntropyPasses(t *testing.T) {
	j := job(t, "mcore-1.7b", "dgx-h100", 8, 4096, 8)
	p := mustParse(t, "dp=8")
	k := newKernels(j.Cluster.Accel, p.Precision)
	head := j.headCompute(p, k)
	T, V, h := 4096.0, 131072.0, 2048.0
	gemmF, gemmB := k.gemmFB(T, V, h)
	ceF := head.fwd - gemmF - k.stream(T*h*2*2, 1)
	ceB := head.bwd - gemmB - k.stream(2*T*h*2*2, 1)
	within(t, "cross-entropy forward", ceF, k.stream(T*V*38, 6), 1e-9)
	within(t, "cross-entropy backward", ceB, k.stream(T*V*14, 2), 1e-9)
	if share := (ceF + ceB) / head.total(); share < 0.3 {
		t.Errorf("with a 128K vocabulary and h=2048 the loss is %.0f%% of the output layer's time; expected a third or more", 100*share)
	}
}

// Under fp8 the four GEMM inputs are kept as their one-byte copies:
// per token and layer, 2h + a·d + f bytes less than bf16 (before the tp
// split of the last three).
func TestFP8KeepsGEMMInputsInOneByte(t *testing.T) {
	j := job(t, "llama3-8b", "dgx-h100", 8, 8192, 8)
	b, f := j.layerToken(mustParse(t, "precision=bf16")), j.layerToken(mustParse(t, "precision=fp8"))
	m := j.Model
	h, ad, ffn := float64(m.Hidden), float64(m.Heads*m.HD()), float64(m.FFN)
	within(t, "replicated saving", b.repl-f.repl, 2*h, 1e-12)
	within(t, "split saving", b.split-f.split, ad+ffn, 1e-12)
	// The weights' fp8 copies are cast once per step, not per micro-batch.
	k8, kb := newKernels(j.Cluster.Accel, FP8), newKernels(j.Cluster.Accel, BF16)
	f8, _ := k8.gemmFB(8192, 4096, 4096)
	fb, _ := kb.gemmFB(8192, 4096, 4096)
	if !(f8 < fb) {
		t.Errorf("an fp8 GEMM (%.3g s) should beat bf16 (%.3g s)", f8, fb)
	}
	sp := j.shapeParams(mustParse(t, "dp=8"))
	o8 := j.optimizerTime(mustParse(t, "dp=8,precision=fp8"), sp, k8)
	ob := j.optimizerTime(mustParse(t, "dp=8,precision=bf16"), sp, kb)
	within(t, "fp8 weight cast per step", o8-ob, k8.stream(4*sp.maxStage(), 1), 1e-9)
}

func TestClusterFileTPOverlapKey(t *testing.T) {
	c, err := ParseClusterFile([]byte("base = \"dgx-a100\"\ntp_comm_overlap = true\n"))
	if err != nil || !c.TPCommOverlap {
		t.Fatalf("tp_comm_overlap: %v %+v", err, c.TPCommOverlap)
	}
	h, _ := ClusterPreset("dgx-h100")
	a, _ := ClusterPreset("dgx-a100-40gb")
	if !h.TPCommOverlap || a.TPCommOverlap || a.Accel.Memory != 40960*mib {
		t.Errorf("presets: h100 overlap %v, a100-40gb overlap %v memory %d", h.TPCommOverlap, a.TPCommOverlap, a.Accel.Memory)
	}
	for _, f := range []string{"jean-zay-a100.toml", "neox-a100-40gb.toml"} {
		h := heldOut{cluster: f, model: "gpt2"}
		if j := h.job(t); !strings.Contains(j.Cluster.Name, strings.TrimSuffix(f, ".toml")) || j.Cluster.Inter.BW >= 23*giga {
			t.Errorf("%s: %s, inter %.3g GB/s", f, j.Cluster.Name, j.Cluster.Inter.BW/giga)
		}
	}
}

// Under sequence parallelism without an overlapping stack, a layer's
// exposed tensor-parallel communication is its four forward collectives
// (all-gather into QKV and the MLP's up projection, reduce-scatter out of
// the attention's and the MLP's output projections), their four
// backwards, and the two all-gathers that the column layers' weight
// gradients gather their inputs with again (model/linear.go backwardCol).
func TestSPGathersAgainForWeightGrads(t *testing.T) {
	j := job(t, "gpt2", "dgx-a100", 8, 1024, 8)
	j.Cluster.TPCommOverlap = false
	j.Cluster.Software.TPGradOverlap = false
	p := mustParse(t, "dp=4,tp=2,sp=on")
	pl := place(p, 8)
	S := j.tokens(p) * float64(j.Model.Hidden) * actBytes(p.Precision)
	ag, rs := j.Cluster.allGather(S, pl.tp), j.Cluster.reduceScatter(S, pl.tp)
	got, _ := j.layerComm(p, pl, j.computeParts(p))
	within(t, "sp=on layer tp comm", got, 2*(ag+rs)+2*(ag+rs)+2*ag, 1e-12)
}
