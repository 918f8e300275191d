package plan

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestCollectiveFormulas(t *testing.T) {
	intra := Link{BW: 100e9, Latency: 2e-6}
	inter := Link{BW: 10e9, Latency: 10e-6}
	c := Cluster{Intra: intra, Inter: inter, DevicesPerNode: 8}
	S := 1e9
	within(t, "ring RS 8 ranks", ring(S, 8, intra), 7*2e-6+7.0/8*S/100e9, 1e-12)
	within(t, "intra all-reduce", c.allReduce(S, group{n: 8, k: 8}), 2*(7*2e-6+7.0/8*S/100e9), 1e-12)
	within(t, "flat inter all-reduce", c.allReduce(S, group{n: 4, k: 1}), 2*(3*10e-6+3.0/4*S/10e9), 1e-12)
	hier := 2*(7*2e-6+7.0/8*S/100e9) + 2*(3*10e-6+3.0/4*(S/8)/10e9)
	within(t, "hierarchical all-reduce", c.allReduce(S, group{n: 32, k: 8}), hier, 1e-12)
	within(t, "hierarchical reduce-scatter", c.reduceScatter(S, group{n: 32, k: 8}), hier/2, 1e-12)
	// Small messages at scale take the tree: 2·⌈log2 n⌉·α + 2S/β.
	within(t, "tree all-reduce", c.allReduce(1e3, group{n: 1024, k: 1}), 2*10*10e-6+2*1e3/10e9, 1e-12)
	if c.allReduce(S, group{n: 1, k: 1}) != 0 || ring(0, 8, intra) != 0 {
		t.Error("a group of one, or an empty buffer, costs nothing")
	}
	if p2p(S, inter) != 10e-6+S/10e9 {
		t.Error("p2p")
	}
}

// place must agree with the mesh layout: rank = Σ c_axis · stride_axis with
// strides from the order, node = rank / devicesPerNode. The reference here
// lists the members of rank 0's group and counts those on node 0.
func TestPlacementMatchesMeshLayout(t *testing.T) {
	for _, sizes := range [][4]int{{8, 1, 4, 2}, {2, 2, 8, 4}, {4, 4, 4, 4}, {1, 8, 2, 3}, {3, 1, 5, 2}, {16, 2, 2, 1}} {
		for _, order := range allOrders() {
			p := Default()
			p.TP, p.CP, p.DP, p.PP, p.Order = sizes[0], sizes[1], sizes[2], sizes[3], order
			for _, node := range []int{1, 4, 8, 6} {
				pl := place(p, node)
				for _, g := range []struct {
					name string
					axes []int
					got  group
				}{{"tp", []int{axTP}, pl.tp}, {"cp", []int{axCP}, pl.cp}, {"dp×cp", []int{axDP, axCP}, pl.dp}, {"pp", []int{axPP}, pl.pp}} {
					n, k := referenceGroup(sizes, order, g.axes, node)
					if g.got.n != n || g.got.k != k {
						t.Errorf("sizes %v order %s node %d %s: got n=%d k=%d, want n=%d k=%d", sizes, order, node, g.name, g.got.n, g.got.k, n, k)
					}
				}
			}
		}
	}
}

func referenceGroup(sizes [4]int, order string, axes []int, node int) (n, k int) {
	stride := map[int]int{}
	s := 1
	for _, name := range strings.Split(order, "-") {
		a := axisIndex(name)
		stride[a] = s
		s *= sizes[a]
	}
	ranks := []int{0}
	for _, a := range axes {
		var next []int
		for _, r := range ranks {
			for c := 0; c < sizes[a]; c++ {
				next = append(next, r+c*stride[a])
			}
		}
		ranks = next
	}
	for _, r := range ranks {
		if r/node == 0 {
			k++
		}
	}
	return len(ranks), k
}

// FLOPs equal Narayanan et al.'s closed forms for GPT:
// 96·B·s·l·h²(1 + s/6h + V/16lh) with full recomputation and
// 72·B·s·l·h²(1 + s/6h + V/12lh) as model FLOPs.
func TestFLOPsNarayanan(t *testing.T) {
	j := job(t, "megatron-1t", "dgx-a100", 3072, 2048, 3072)
	B, s, l, h, V := 3072.0, 2048.0, 128.0, 25600.0, 51200.0
	model, hw := j.FLOPs(mustParse(t, "recompute=full"))
	within(t, "hardware FLOPs", hw, 96*B*s*l*h*h*(1+s/(6*h)+V/(16*l*h)), 1e-12)
	within(t, "model FLOPs", model, 72*B*s*l*h*h*(1+s/(6*h)+V/(12*l*h)), 1e-12)
	m2, hw2 := j.FLOPs(mustParse(t, "recompute=selective,flash=off"))
	within(t, "selective adds the attention scores", hw2-m2, 4*B*s*l*s*h, 1e-12)
	if m3, hw3 := j.FLOPs(mustParse(t, "recompute=selective,flash=on")); m3 != hw3 {
		t.Error("with flash attention selective recomputation recomputes nothing")
	}
}

func TestGEMMEfficiencyGrowsWithSize(t *testing.T) {
	c, _ := ClusterPreset("dgx-h100")
	k := newKernels(c.Accel, BF16)
	prev := 0.0
	for _, d := range []float64{64, 256, 1024, 4096, 16384} {
		e := k.gemmEfficiency(d, d, d)
		if e <= prev || e >= c.Accel.GEMMEff {
			t.Errorf("efficiency at %g = %g (previous %g, max %g)", d, e, prev, c.Accel.GEMMEff)
		}
		prev = e
	}
	// A GEMM too thin to be compute-bound is limited by streaming its operands.
	thin := k.gemm(1, 1, 8192, 8192)
	within(t, "thin GEMM at memory speed", thin, 2*(8192+8192*8192+8192)/k.mem+k.a.KernelGap, 1e-12)
}

func estimate(t *testing.T, j Job, s string) Estimate {
	t.Helper()
	e, err := j.Evaluate(mustParse(t, s))
	if err != nil {
		t.Fatal(err)
	}
	tm := e.Time
	within(t, s+" step = sum of parts", tm.Step, tm.Compute+tm.CommExposed+tm.Bubble+tm.Misc, 1e-12)
	within(t, s+" comm = sum of axes", tm.CommExposed, tm.TP+tm.CP+tm.PP+tm.DP, 1e-12)
	return e
}

func TestTimeMechanisms(t *testing.T) {
	j := job(t, "megatron-145.6b", "dgx-a100", 128, 2048, 256)
	slower := func(name, a, b string) {
		t.Helper()
		ea, eb := estimate(t, j, a), estimate(t, j, b)
		if !(ea.Time.Step > eb.Time.Step) {
			t.Errorf("%s: %s (%.3f s) should be slower than %s (%.3f s)", name, a, ea.Time.Step, b, eb.Time.Step)
		}
	}
	slower("TP across nodes", "dp=2,tp=8,pp=8,order=dp-tp-cp-pp", "dp=2,tp=8,pp=8")
	slower("full recomputation", "dp=2,tp=8,pp=8,recompute=full", "dp=2,tp=8,pp=8")
	slower("fewer micro-batches, bigger bubble", "dp=2,tp=8,pp=8,mbs=16", "dp=2,tp=8,pp=8,mbs=1")
	slower("materialised attention", "dp=2,tp=8,pp=8,flash=off", "dp=2,tp=8,pp=8")
	slower("fp32", "dp=2,tp=8,pp=8,precision=fp32", "dp=2,tp=8,pp=8")
	slower("ZeRO-3 traffic per micro-batch", "dp=2,tp=8,pp=8,zero=3", "dp=2,tp=8,pp=8")

	// Bubble: (pp-1)/vpp stage times; interleaving by v divides it by v.
	one := estimate(t, j, "dp=2,tp=8,pp=8,mbs=4")
	within(t, "1F1B bubble", one.Time.Bubble, 7*meanStage(t, j, one.Plan), 1e-9)
	two := estimate(t, j, "dp=2,tp=8,pp=8,mbs=4,vpp=2,schedule=interleaved")
	if r := two.Time.Bubble / one.Time.Bubble; r < 0.45 || r > 0.55 {
		t.Errorf("vpp=2 bubble ratio %.3f, want about 1/2", r)
	}
	if g := estimate(t, j, "dp=2,tp=8,pp=8,mbs=4,schedule=gpipe"); g.Time.Step != one.Time.Step {
		t.Errorf("GPipe and 1F1B should take the same time (they differ in memory)")
	}
}

func meanStage(t *testing.T, j Job, p Plan) float64 {
	pl := place(p, j.Cluster.DevicesPerNode)
	lc := j.layerCost(p, pl)
	sp := j.shapeParams(p)
	sum := 0.0
	for s := 0; s < p.PP; s++ {
		sum += j.stage(p, pl, lc, sp, s).total()
	}
	return sum / float64(p.PP)
}

// Data-parallel gradient reduction hides behind the last micro-batch's
// backward except the last bucket: with a big replica and a slow network it
// shows, with a tiny one it is just the bucket.
func TestDataParallelOverlap(t *testing.T) {
	j := job(t, "megatron-1.7b", "dgx-a100", 64, 2048, 64)
	e := estimate(t, j, "dp=64")
	c := j.Cluster
	pl := place(e.Plan, 8)
	P := float64(j.Model.Params())
	total := c.allReduce(P*2, pl.dp)
	bucket := c.allReduce(bucketParams*2, pl.dp)
	if !(e.Time.DP >= bucket*(1-1e-9) && e.Time.DP < total) {
		t.Errorf("exposed DP %.4f s, want between the last bucket %.4f s and the whole %.4f s", e.Time.DP, bucket, total)
	}
	slow := j
	slow.Cluster.Inter.BW /= 100
	es := estimate(t, slow, "dp=64")
	if !(es.Time.DP > 10*e.Time.DP) {
		t.Errorf("a 100× slower network should expose more: %.4f vs %.4f", es.Time.DP, e.Time.DP)
	}
}

func TestHardwareAndPrecision(t *testing.T) {
	a := job(t, "llama3-70b", "dgx-a100", 64, 4096, 64)
	h := job(t, "llama3-70b", "dgx-h100", 64, 4096, 64)
	const p = "dp=2,tp=8,pp=4,recompute=full"
	ea, eh := estimate(t, a, p), estimate(t, h, p)
	if !(eh.Time.Step < ea.Time.Step/2) {
		t.Errorf("H100 %.2f s vs A100 %.2f s: want over 2× faster", eh.Time.Step, ea.Time.Step)
	}
	e8 := estimate(t, h, p+",precision=fp8")
	if !(e8.Time.Step < eh.Time.Step && e8.Time.Step > eh.Time.Step/2) {
		t.Errorf("fp8 %.2f s vs bf16 %.2f s: want faster, but less than 2×", e8.Time.Step, eh.Time.Step)
	}
	if _, err := a.Evaluate(mustParse(t, p+",precision=fp8")); err == nil || !strings.Contains(err.Error(), "no fp8 peak") {
		t.Errorf("fp8 on A100: %v", err)
	}
}

func TestCheckNamesTheRule(t *testing.T) {
	j := job(t, "llama3-8b", "dgx-h100", 64, 8192, 128)
	for _, c := range []struct{ plan, want string }{
		{"dp=64", ""},
		{"dp=32", "= 32, but the job has 64 devices"},
		{"dp=8,tp=8,sp=on", ""},
		{"dp=1,tp=64", "tp=64 does not divide heads=32"},
		{"dp=4,tp=16", "tp=16 does not divide kv_heads=8"},
		{"dp=1,pp=64", "pp=64 stages for layers=32 leaves a middle stage without layers"},
		{"dp=16,pp=4,vpp=3,schedule=interleaved", ""}, // uneven: 12 chunks of 3 or 2 layers
		{"dp=16,pp=4,vpp=9,schedule=interleaved", "pp·vpp = 4·9 chunks for layers=32 leaves a chunk"},
		{"dp=64,mbs=4", "dp·mbs = 64·4 does not divide the global batch 128"},
		{"dp=8,pp=8,vpp=2,schedule=interleaved,mbs=4", "interleaved needs pp=8 to divide the 4 micro-batches"},
		{"dp=8,cp=8", ""},
		{"dp=1,cp=64", ""},
		{"dp=2,pp=32", ""},
	} {
		err := j.Check(mustParse(t, c.plan))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: unexpected %v", c.plan, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrInvalid)):
			t.Errorf("%s: got %v, want %q", c.plan, err, c.want)
		}
	}
	short := job(t, "gpt2", "dgx-a100", 8, 2048, 8)
	if err := short.Validate(); err == nil || !strings.Contains(err.Error(), "1024 learned positions") {
		t.Errorf("seq beyond GPT-2's positions: %v", err)
	}
	odd := job(t, "llama3-8b", "dgx-h100", 8, 1000, 8)
	if err := odd.Check(mustParse(t, "dp=1,cp=8")); err == nil || !strings.Contains(err.Error(), "2·cp") {
		t.Errorf("cp=8 with seq 1000: %v", err)
	}
}

func TestWhyNamesTheDominantTerm(t *testing.T) {
	j := job(t, "llama3-70b", "dgx-h100", 8, 8192, 64)
	e := estimate(t, j, "dp=1,tp=8,recompute=none,flash=off,mbs=8")
	if e.Fits() {
		t.Fatal("expected this plan not to fit")
	}
	why := e.Why()
	for _, s := range []string{"needs", "> 79.6 GiB", "activations"} {
		if !strings.Contains(why, s) {
			t.Errorf("Why() = %q, want it to mention %q", why, s)
		}
	}
	pp := estimate(t, job(t, "llama3-70b", "dgx-h100", 32, 8192, 64), "dp=1,tp=8,pp=4,recompute=none,flash=off,mbs=2")
	if w := pp.Why(); !strings.Contains(w, "1f1b keeps 4 micro-batches on stage 0") {
		t.Errorf("Why() = %q, want the in-flight count", w)
	}
}

func TestEstimateMetrics(t *testing.T) {
	j := job(t, "llama3-8b", "dgx-h100", 8, 4096, 32)
	e := estimate(t, j, "dp=8,zero=1,recompute=full")
	within(t, "MFU", e.MFU, e.ModelFLOPs/e.Time.Step/8/989.4e12, 1e-12)
	within(t, "HFU/MFU", e.HFU/e.MFU, e.HWFLOPs/e.ModelFLOPs, 1e-12)
	within(t, "tokens/s", e.TokensPerS, 32*4096/e.Time.Step, 1e-12)
	if !(e.MFU > 0.2 && e.MFU < 0.7) || math.IsNaN(e.MFU) {
		t.Errorf("MFU %.3f outside anything a GPU reaches", e.MFU)
	}
}
