package plan

import (
	"testing"
)

// TestGeneralSearchBounds holds the general path's lower bounds (the
// expert-group, mean-rank, schedule and per-order bounds, the seed and the
// mbs-monotone memory skip) to the search without them: the same plans in
// the same order with the same step times, and every candidate counted
// once either way (a cut counts its plans under the bound or under the
// rule that rejects them, never both).
func TestGeneralSearchBounds(t *testing.T) {
	if testing.Short() {
		t.Skip("searches every plan of five jobs twice")
	}
	for _, c := range []struct {
		name                string
		model, cluster      string
		devices, seq, batch int
		fix                 string
	}{
		{"experts", "qwen3-30b-a3b", "dgx-h100", 16, 4096, 64, ""},
		{"shared experts and MLA", "deepseek-v2-lite", "dgx-h100", 32, 4096, 128, ""},
		{"windows, sinks, expert biases", "gpt-oss-120b", "dgx-h100", 32, 4096, 64, "precision=bf16"},
		{"EP overlap", "mixtral-8x7b", "mbridge-h100-a2a-overlap.toml", 32, 4096, 128, "precision=bf16"},
		{"dense dualpipev", "llama3-8b", "dgx-h100", 16, 8192, 128, "schedule=dualpipev"},
		{"MTP, DualPipe", "deepseek-v3", "dgx-h100", 512, 4096, 1024, "pp=8,schedule=dualpipe,precision=fp8,recompute=full"},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := heldOut{model: c.model, cluster: c.cluster, devices: c.devices, seq: c.seq, batch: c.batch}.job(t)
			f, err := ParseFix(c.fix)
			if err != nil {
				t.Fatal(err)
			}
			o := Options{Top: 5, Fix: f}
			got, err := j.Search(o)
			if err != nil {
				t.Fatal(err)
			}
			want, err := j.search(o, true)
			if err != nil {
				t.Fatal(err)
			}
			if len(want.Plans) == 0 {
				t.Fatalf("no plan fits: %v", want.Rejected)
			}
			if len(got.Plans) != len(want.Plans) {
				t.Fatalf("bounded search kept %d plans, unbounded %d", len(got.Plans), len(want.Plans))
			}
			for i := range want.Plans {
				g, w := got.Plans[i], want.Plans[i]
				if g.Plan != w.Plan || g.Time.Step != w.Time.Step {
					t.Errorf("#%d: bounded %s (%.6g s), unbounded %s (%.6g s)", i+1, g.Plan.Short(), g.Time.Step, w.Plan.Short(), w.Time.Step)
				}
			}
			if got.Candidates() != want.Candidates() {
				t.Errorf("bounded search counts %d candidates, unbounded %d", got.Candidates(), want.Candidates())
			}
			for k, n := range want.Rejected {
				if k != rejMemory && got.Rejected[k] != n {
					t.Errorf("rejected %q: bounded %d, unbounded %d", k, got.Rejected[k], n)
				}
			}
			t.Logf("best %s %.4g s; bounded costed %d of %d (unbounded %d)", want.Plans[0].Plan.Short(), want.Plans[0].Time.Step,
				got.Evaluated, got.Candidates(), want.Evaluated)
		})
	}
}
