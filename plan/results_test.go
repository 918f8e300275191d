package plan

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// Every candidate is either a plan that fits or a rejection, whatever is
// pinned, and a search that meets no candidate says which rule the pinned
// keys break.
func TestCandidatesAddUp(t *testing.T) {
	j := smallJob(t)
	for _, fix := range []string{"", "tp=2", "pp=2,schedule=interleaved", "dp=16", "mbs=3", "tp=3", "dp=4,tp=2"} {
		f, err := ParseFix(fix)
		if err != nil {
			t.Fatal(err)
		}
		res, err := j.Search(Options{Fix: f})
		if err != nil {
			t.Fatal(err)
		}
		sum := res.Fitting
		for _, v := range res.Rejected {
			sum += v
		}
		if sum != res.Candidates() || res.Candidates() == 0 {
			t.Errorf("--fix %q: fit %d + rejected %v = %d, candidates %d", fix, res.Fitting, res.Rejected, sum, res.Candidates())
		}
		if len(res.Plans) == 0 && len(j.Advice(res, Options{Fix: f})) == 0 {
			t.Errorf("--fix %q: no plan and no advice", fix)
		}
	}
	f, _ := ParseFix("dp=16")
	res, _ := j.Search(Options{Fix: f})
	if !strings.Contains(res.Reason, "16") || res.Rejected[rejDevices] != 1 {
		t.Errorf("dp=16 on 4 devices: reason %q, rejected %v", res.Reason, res.Rejected)
	}
}

// The closest plan's advice names a device count at which a plan fits,
// and that count's search agrees.
func TestAdviceWhenNothingFits(t *testing.T) {
	j := job(t, "llama3-8b", "dgx-h100", 1, 4096, 8)
	res, err := j.Search(Options{})
	if err != nil {
		t.Fatal(err)
	}
	adv := j.Advice(res, Options{})
	if len(adv) != 3 || !strings.Contains(adv[0], "closest") || !strings.Contains(adv[2], "on 2 devices") {
		t.Fatalf("advice %q", adv)
	}
	j.Devices = 2
	if res, _ := j.Search(Options{Top: 1}); len(res.Plans) != 1 || !strings.Contains(adv[2], res.Plans[0].Plan.Short()) {
		t.Errorf("advice %q, search on 2 devices %v", adv[2], res.Plans)
	}
}

// The listed plans are genuinely different: no two differ only in order
// or vpp with the same prediction, and each variant evaluates to its
// row's prediction.
func TestVariantsCollapse(t *testing.T) {
	j := job(t, "llama3-70b", "dgx-h100", 64, 8192, 128)
	f, _ := ParseFix("tp=4,pp=2,zero=2,precision=fp8")
	res, err := j.Search(Options{Fix: f, Top: 4})
	if err != nil {
		t.Fatal(err)
	}
	variants := 0
	for i, a := range res.Plans {
		for _, b := range res.Plans[i+1:] {
			if equivalent(a, b) {
				t.Errorf("%s and %s are one choice", a.Plan.Short(), b.Plan.Short())
			}
		}
		for _, v := range a.Variants {
			variants++
			e, err := j.Evaluate(v)
			if err != nil || math.Abs(e.Time.Step/a.Time.Step-1) > sameTime || !equivalent(a, e) {
				t.Errorf("variant %s of %s: %v, %g vs %g s", v.Short(), a.Plan.Short(), err, e.Time.Step, a.Time.Step)
			}
		}
		if j := a.JSON(); j.PlanString != a.Plan.String() || len(j.Variants) != len(a.Variants) {
			t.Errorf("JSON plan_string %q, variants %v", j.PlanString, j.Variants)
		}
	}
	if variants == 0 {
		t.Errorf("no variants folded in %d plans", len(res.Plans))
	}
}

// A cluster whose numbers make a prediction infinite is refused with the
// field, its value and the rule; a valid one gives finite JSON.
func TestClusterRanges(t *testing.T) {
	for field, toml := range map[string]string{
		"intra.bw_gbps":           "[intra]\nbw_gbps = 1e-300\n",
		"inter.bw_gbps":           "[inter]\nbw_gbps = 1e-9\n",
		"inter.latency_us":        "[inter]\nbw_gbps = 1\nlatency_us = 1e300\n",
		"device.peak_tflops.bf16": "[device]\npeak_tflops = { bf16 = 1e-300 }\n",
		"device.mem_bw_gbps":      "[device]\nmem_bw_gbps = 1e-200\n",
	} {
		_, err := ParseClusterFile([]byte("base = \"dgx-h100\"\n" + toml))
		if err == nil || !strings.Contains(err.Error(), field+"=") {
			t.Errorf("%s: %v", field, err)
		}
	}
	j := smallJob(t)
	res, _ := j.Search(Options{Top: 3})
	if _, err := json.Marshal(j.Report(res)); err != nil {
		t.Error(err)
	}
}

// zb-h1 keeps 1F1B's memory and cuts the bubble by 2·(pp−1)·W, W the mean
// stage's weight-gradient GEMMs; the search costs it only when pinned.
func TestZeroBubbleH1(t *testing.T) {
	j := job(t, "llama3-70b", "dgx-h100", 64, 8192, 128)
	a, err := j.Evaluate(mustParse(t, "dp=2,tp=8,pp=4,sp=on,schedule=1f1b"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := j.Evaluate(mustParse(t, "dp=2,tp=8,pp=4,sp=on,schedule=zb-h1"))
	if err != nil {
		t.Fatal(err)
	}
	if a.Memory != b.Memory || a.Time.Compute != b.Time.Compute {
		t.Errorf("zb-h1 memory %v / compute %g differ from 1f1b's %v / %g", b.Memory, b.Time.Compute, a.Memory, a.Time.Compute)
	}
	lc := j.layerCost(b.Plan, place(b.Plan, j.Cluster.DevicesPerNode))
	w := lc.compute.wgt * float64(j.Model.Layers) / 4
	if w <= 0 || math.Abs(a.Time.Bubble-b.Time.Bubble-2*3*w) > 1e-9*a.Time.Step {
		t.Errorf("bubble 1f1b %g, zb-h1 %g, 2(p-1)W = %g", a.Time.Bubble, b.Time.Bubble, 6*w)
	}
	// At unit costs F = B = W the bubble is a third of 1F1B's (Qi et al.):
	// a GEMM's dX and dW are equal, so W is half of the linear backward.
	if r := b.Time.Bubble / a.Time.Bubble; r > 0.7 || r < 0.2 {
		t.Errorf("zb-h1/1f1b bubble %.2f", r)
	}
	res, _ := j.Search(Options{Top: 20})
	for _, e := range res.Plans {
		if e.Plan.Schedule == ZBH1 {
			t.Errorf("unpinned search proposes %s", e.Plan.Short())
		}
	}
	f, _ := ParseFix("schedule=zb-h1,pp=4")
	if res, _ := j.Search(Options{Fix: f, Top: 1}); len(res.Plans) != 1 || res.Plans[0].Plan.Schedule != ZBH1 {
		t.Errorf("pinned zb-h1: %v", res.Plans)
	}
	if _, err := Parse("pp=4,vpp=2,schedule=zb-h1"); err != nil {
		t.Fatal(err)
	} else if err := mustParse(t, "pp=4,vpp=2,schedule=zb-h1").Validate(); err == nil {
		t.Error("zb-h1 with vpp=2 validates")
	}
}

func TestUnitsByMagnitude(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{Bytes(512), "512 B"}, {Bytes(3 << 19), "1.5 MiB"}, {Bytes(80 * gib), "80.0 GiB"}, {Bytes(3 << 40), "3.0 TiB"},
		{Count(950), "950"}, {Count(124_439_808), "124.4M"}, {Count(8.03e9), "8.03B"}, {Count(1.2e12), "1.20T"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
