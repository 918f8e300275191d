package plan

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// smallJob is GPT-2 on 4 devices, 2 per node, with 2 GiB each: small enough
// to enumerate every key of every plan by brute force.
func smallJob(t testing.TB) Job {
	j := job(t, "gpt2", "dgx-a100", 4, 256, 8)
	j.Cluster.DevicesPerNode = 2
	j.Cluster.Accel.Memory = 2 * gib
	j.Cluster.Accel.Reserved = gib / 4
	return j
}

// bruteForce enumerates the raw product of every key's values, keeps what
// Check accepts, applies the search's documented equivalences (fp16 only
// when pinned; zero>0 only with dp·cp>1; pp=1 only as 1f1b; selective with
// flash is recompute=none; interleaved only at vpp with pp·vpp dividing L,
// L+1 or L+2; one order per distinct placement) and returns the count and
// the fastest fitting plan.
func bruteForce(j Job) (evaluated, fitting int, best Estimate) {
	N := j.Devices
	best.Time.Step = -1
	for _, tp := range divisors(N) {
		for _, cp := range divisors(N / tp) {
			for _, pp := range divisors(N / tp / cp) {
				dp := N / (tp * cp * pp)
				for vpp := 1; vpp <= j.Model.Layers+2; vpp++ {
					for mbs := 1; mbs <= j.GlobalBatch; mbs++ {
						base := Plan{DP: dp, TP: tp, PP: pp, CP: cp, VPP: vpp, MBS: mbs}
						if j.GlobalBatch%(dp*mbs) != 0 || !splittable(j.Model.Layers, pp, vpp) {
							continue // Check rejects every variant; skip them for speed
						}
						for _, q := range variants(base) {
							q.Order = DefaultOrder
							if j.Check(q) != nil || !canonical(q, j.Model.Layers) {
								continue
							}
							for _, o := range allOrders() {
								p := q
								p.Order = o
								if j.Check(p) != nil || !firstOrder(p, j.Cluster.DevicesPerNode) {
									continue
								}
								evaluated++
								e := j.estimate(p, place(p, j.Cluster.DevicesPerNode))
								if !e.Fits() {
									continue
								}
								fitting++
								if best.Time.Step < 0 || better(e, best) {
									best = e
								}
							}
						}
					}
				}
			}
		}
	}
	return evaluated, fitting, best
}

func variants(base Plan) []Plan {
	var out []Plan
	for z := 0; z <= 3; z++ {
		for _, sp := range []bool{false, true} {
			for _, sc := range []Schedule{GPipe, OneFOneB, Interleaved} {
				for _, rc := range []Recompute{RecomputeNone, RecomputeSelective, RecomputeFull} {
					for _, pr := range []Precision{FP32, BF16, FP16, FP8} {
						for _, fl := range []bool{false, true} {
							p := base
							p.ZeRO, p.SP, p.Schedule, p.Recompute, p.Precision, p.Flash = z, sp, sc, rc, pr, fl
							out = append(out, p)
						}
					}
				}
			}
		}
	}
	return out
}

func canonical(p Plan, layers int) bool {
	c := p.PP * p.VPP
	switch {
	case p.Schedule == Interleaved && layers%c != 0 && (layers+1)%c != 0 && (layers+2)%c != 0:
		return false
	case p.Precision == FP16 || p.Precision == FP8: // searched only when pinned
		return false
	case p.DP*p.CP == 1 && p.ZeRO > 0:
		return false
	case p.PP == 1 && p.Schedule != OneFOneB:
		return false
	case p.Recompute == RecomputeSelective && p.Flash:
		return false
	}
	return true
}

func firstOrder(p Plan, node int) bool {
	pl := place(p, node)
	for _, o := range allOrders() {
		q := p
		q.Order = o
		if place(q, node) == pl {
			return o == p.Order
		}
	}
	return false
}

func TestSearchMatchesBruteForce(t *testing.T) {
	if testing.Short() {
		t.Skip("brute force enumerates every raw combination of keys")
	}
	j := smallJob(t)
	res, err := j.Search(Options{Top: 3})
	if err != nil {
		t.Fatal(err)
	}
	n, fit, best := bruteForce(j)
	if res.Evaluated != n || res.Fitting != fit {
		t.Fatalf("search evaluated %d (%d fit), brute force %d (%d fit)", res.Evaluated, res.Fitting, n, fit)
	}
	if res.Rejected[rejMemory] != n-fit {
		t.Errorf("memory rejections %d, want %d", res.Rejected[rejMemory], n-fit)
	}
	if fit == 0 || fit == n {
		t.Fatalf("the test job should have plans on both sides of the budget (%d of %d fit)", fit, n)
	}
	if len(res.Plans) != 3 || res.Plans[0].Plan != best.Plan || res.Plans[0].Time.Step != best.Time.Step {
		t.Fatalf("search's best %s, brute force's %s", res.Plans[0].Plan, best.Plan)
	}
	for i := 1; i < len(res.Plans); i++ {
		if better(res.Plans[i], res.Plans[i-1]) {
			t.Errorf("plans not ranked: %d before %d", i-1, i)
		}
	}
}

func TestSearchFix(t *testing.T) {
	j := smallJob(t)
	all := mustParse(t, "dp=2,tp=2,zero=1,sp=on,mbs=2,recompute=selective,flash=off,precision=bf16")
	res, err := j.Search(Options{Fix: FixPlan(all)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Evaluated != 1 || len(res.Plans) != 1 || res.Plans[0].Plan != all {
		t.Fatalf("all keys pinned: evaluated %d, plans %v", res.Evaluated, res.Plans)
	}
	want, _ := j.Evaluate(all)
	if !reflect.DeepEqual(res.Plans[0], want) {
		t.Errorf("search and Evaluate disagree on the pinned plan")
	}

	f, err := ParseFix("tp=2,zero=2")
	if err != nil {
		t.Fatal(err)
	}
	res, err = j.Search(Options{Fix: f, Top: 50})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Plans) == 0 {
		t.Fatal("no plan with tp=2,zero=2")
	}
	for _, e := range res.Plans {
		if e.Plan.TP != 2 || e.Plan.ZeRO != 2 || !f.Allows(e.Plan) {
			t.Errorf("plan %s ignores the fix", e.Plan)
		}
	}
	if f.String() != "tp=2,zero=2" || !f.Pinned("tp") || f.Pinned("dp") {
		t.Errorf("Fix.String() = %q", f.String())
	}
	// fp16 is searched when pinned.
	f16, _ := ParseFix("precision=fp16")
	res, _ = j.Search(Options{Fix: f16, Top: 1})
	if len(res.Plans) != 1 || res.Plans[0].Plan.Precision != FP16 {
		t.Errorf("pinned fp16 not searched")
	}
}

func TestSearchRejectionReasons(t *testing.T) {
	j := job(t, "llama3-8b", "dgx-h100", 64, 8192, 64)
	res, err := j.Search(Options{Top: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{rejHeads, rejKVHeads, rejLayers, rejMemory} {
		if res.Rejected[k] == 0 {
			t.Errorf("no %q rejections in %v", k, res.Rejected)
		}
	}
	if res.Evaluated < 1000 || len(res.Plans) != 1 || !res.Plans[0].Fits() {
		t.Errorf("evaluated %d, plans %d", res.Evaluated, len(res.Plans))
	}
	f, _ := ParseFix("precision=fp8")
	a := job(t, "llama3-8b", "dgx-a100", 8, 2048, 8)
	res, _ = a.Search(Options{Fix: f})
	if len(res.Plans) != 0 || res.Rejected[rejPrecision] == 0 {
		t.Errorf("fp8 on A100: %d plans, rejected %v", len(res.Plans), res.Rejected)
	}
	f, _ = ParseFix("sp=on,tp=1")
	res, _ = a.Search(Options{Fix: f})
	if len(res.Plans) != 0 || res.Rejected[rejSPTP] == 0 {
		t.Errorf("sp=on with tp=1: %d plans, rejected %v", len(res.Plans), res.Rejected)
	}
	if _, err := a.Search(Options{Fix: Fix{keys: map[string]bool{"tp": true}, plan: Plan{TP: 0}}}); err == nil {
		t.Error("a pinned tp=0 must be an error")
	}
}

func TestExplain(t *testing.T) {
	j := job(t, "llama3-70b", "dgx-h100", 64, 8192, 128)
	res, err := j.Search(Options{Top: 1})
	if err != nil {
		t.Fatal(err)
	}
	best := &res.Plans[0]
	for _, c := range []struct {
		plan string
		want []string
	}{
		{"dp=8,tp=8,recompute=none,flash=off", []string{"rejected: needs", "activations", "1f1b keeps 1 micro-batch on stage 0", "versus the best plan"}},
		{"dp=64", []string{"rejected: needs", "optimizer"}},
		{"dp=3", []string{"rejected:", "but the job has 64 devices"}},
		{"dp=2,tp=8,pp=4,zero=1,recompute=full", []string{"fits:", "% slower", "bubble", "recompute=full adds"}},
		{best.Plan.String(), []string{"this is the best plan found"}},
	} {
		text := j.Explain(mustParse(t, c.plan), best)
		for _, w := range c.want {
			if !strings.Contains(text, w) {
				t.Errorf("Explain(%s) lacks %q:\n%s", c.plan, w, text)
			}
		}
	}
}

func TestTableAndReport(t *testing.T) {
	j := smallJob(t)
	res, err := j.Search(Options{Top: 2})
	if err != nil {
		t.Fatal(err)
	}
	text := j.Table(res)
	for _, w := range []string{"gpt2", "124.4M params", "mem GiB", "MFU", "considered", "memory: over the device budget", res.Plans[0].Plan.Short()} {
		if !strings.Contains(text, w) {
			t.Errorf("table lacks %q:\n%s", w, text)
		}
	}
	r := j.Report(res)
	if r.Model.Params != 124_439_808 || len(r.Plans) != 2 || r.Evaluated != res.Candidates() || r.Costed != res.Evaluated ||
		r.Plans[0].PlanString != res.Plans[0].Plan.String() ||
		r.Plans[0].Time.Step != res.Plans[0].Time.Step || r.Plans[0].Memory.Budget != 2*gib {
		t.Errorf("report %+v", r)
	}
}

func TestDivisors(t *testing.T) {
	for n, want := range map[int]string{1: "[1]", 12: "[1 2 3 4 6 12]", 49: "[1 7 49]", 126: "[1 2 3 6 7 9 14 18 21 42 63 126]"} {
		if got := fmt.Sprint(divisors(n)); got != want {
			t.Errorf("divisors(%d) = %s, want %s", n, got, want)
		}
	}
	if len(divisors(16384)) != 15 {
		t.Error("2^14 has 15 divisors")
	}
	if len(allOrders()) != 24 || allOrders()[0] != DefaultOrder {
		t.Error("24 orders, the default first")
	}
}

func TestSearchNothingFits(t *testing.T) {
	j := job(t, "llama3-8b", "dgx-h100", 1, 4096, 8)
	res, err := j.Search(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Plans) != 0 || res.Evaluated == 0 || res.Rejected[rejMemory] != res.Evaluated {
		t.Fatalf("plans %d, evaluated %d, rejected %v", len(res.Plans), res.Evaluated, res.Rejected)
	}
	// The smallest plan is the most frugal one: full recomputation, micro-batch 1.
	sm := res.Smallest
	if sm.Plan.Recompute != RecomputeFull || sm.Plan.MBS != 1 || !strings.Contains(sm.Why(), "optimizer states") {
		t.Errorf("smallest %s: %s", sm.Plan.Short(), sm.Why())
	}
	if text := j.Table(res); !strings.Contains(text, "no plan fits") || !strings.Contains(text, "the smallest") {
		t.Errorf("table:\n%s", text)
	}
}
