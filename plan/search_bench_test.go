package plan

import "testing"

// The target: a full search (every key free) for Llama 3 405B on
// 16,384 H100s at sequence 8192. The global batch is Llama 3's 16M tokens.
func bigJob(t testing.TB) Job { return job(t, "llama3-405b", "dgx-h100", 16384, 8192, 2048) }

// BenchmarkSearchLlama405B measures that search; docs/BENCHMARKS.md quotes it.
//
//	go test ./plan -run '^$' -bench SearchLlama405B -benchtime 5x
func BenchmarkSearchLlama405B(b *testing.B) {
	j := bigJob(b)
	var res Result
	for i := 0; i < b.N; i++ {
		var err error
		if res, err = j.Search(Options{Top: 10}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(res.Evaluated), "plans")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(res.Evaluated), "ns/plan")
}

// moeJob is issue 25's target: a full search for DeepSeek-V3 on 2,048
// H100s at sequence 4096, the report's final batch of 15,360 sequences
// (63M tokens).
func moeJob(t testing.TB) Job { return job(t, "deepseek-v3", "dgx-h100", 2048, 4096, 15360) }

// BenchmarkSearchDeepSeekV3 measures that search; docs/BENCHMARKS.md
// quotes it.
//
//	go test ./plan -run '^$' -bench SearchDeepSeekV3 -benchtime 5x
func BenchmarkSearchDeepSeekV3(b *testing.B) {
	j := moeJob(b)
	var res Result
	for i := 0; i < b.N; i++ {
		var err error
		if res, err = j.Search(Options{Top: 10}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(res.Candidates()), "candidates")
	b.ReportMetric(float64(res.Evaluated), "costed")
}

// BenchmarkEvaluate is one plan through the whole cost model.
func BenchmarkEvaluate(b *testing.B) {
	j := bigJob(b)
	p := mustParse(b, "dp=128,tp=8,pp=2,cp=8,vpp=3,zero=1,sp=on,schedule=interleaved,recompute=selective")
	for i := 0; i < b.N; i++ {
		if _, err := j.Evaluate(p); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSearchLlama405BCount counts the plans the big search evaluates with a
// plain enumeration of every key's valid values (Check decides validity)
// and the documented equivalences, without the search's loop structure.
func TestSearchLlama405BCount(t *testing.T) {
	if testing.Short() {
		t.Skip("enumerates about a million plans")
	}
	j := bigJob(t)
	res, err := j.Search(Options{Top: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, tp := range divisors(j.Devices) {
		for _, cp := range divisors(j.Devices / tp) {
			for _, pp := range divisors(j.Devices / tp / cp) {
				dp := j.Devices / tp / cp / pp
				orders := distinctPlacements(Plan{DP: dp, TP: tp, CP: cp, PP: pp}, j.Cluster.DevicesPerNode)
				for vpp := 1; vpp <= j.Model.Layers+2; vpp++ {
					for _, mbs := range divisors(j.GlobalBatch) {
						want += orders * countVariants(j, Plan{DP: dp, TP: tp, CP: cp, PP: pp, VPP: vpp, MBS: mbs, Order: DefaultOrder})
					}
				}
			}
		}
	}
	if res.Evaluated != want {
		t.Fatalf("search evaluated %d plans, enumeration counts %d", res.Evaluated, want)
	}
	if res.Evaluated < 100000 || len(res.Plans) != 1 {
		t.Fatalf("evaluated %d, %d plans", res.Evaluated, len(res.Plans))
	}
	t.Logf("evaluated %d, %d fit; best %s (%.1f%% MFU)", res.Evaluated, res.Fitting, res.Plans[0].Plan.Short(), 100*res.Plans[0].MFU)
}

func distinctPlacements(p Plan, node int) int {
	seen := map[placement]bool{}
	for _, o := range allOrders() {
		p.Order = o
		seen[place(p, node)] = true
	}
	return len(seen)
}

func countVariants(j Job, base Plan) int {
	if base.Devices() != j.Devices || j.GlobalBatch%(base.DP*base.MBS) != 0 || !splittable(j.Model.Layers, base.PP, base.VPP) {
		return 0
	}
	if base.VPP > 1 && !canonical(Plan{PP: base.PP, VPP: base.VPP, Schedule: Interleaved}, j.Model.Layers) {
		return 0 // vpp > 1 needs interleaved, which is not searched at this vpp
	}
	n := 0
	for _, q := range variants(base) {
		q.Order = DefaultOrder
		if canonical(q, j.Model.Layers) && j.Check(q) == nil {
			n++
		}
	}
	return n
}
