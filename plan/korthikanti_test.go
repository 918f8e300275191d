package plan

import (
	"math"
	"strings"
	"testing"
)

// korthikantiShape is one model of Korthikanti et al. 2022, Table 3 (tp=8,
// sequence 2048, one replica), with the interleaving its Figure 1 implies
// (the first stage's activations there are L/p·(1 + (p−1)/(p·v)) layers in
// flight: v = 3 for 175B and 530B, no interleaving for 1T).
type korthikantiShape struct {
	model        string
	pp, vpp, mbs int
	gpus         int
	// Figure 1, activations of the first stage in GiB, without
	// recomputation and with sequence parallelism plus selective
	// recomputation; Figure 7, per-layer activations as a percentage of the
	// tensor-parallel baseline with sp, selective, both, and full
	// recomputation. Read off the figures as Calculon's validation does
	// (calculon-ai/calculon, calculon/llm/validation.py).
	fig1None, fig1SeqSel                   float64
	fig7Seq, fig7Sel, fig7SeqSel, fig7Full float64
}

func korthikantiShapes() []korthikantiShape {
	return []korthikantiShape{
		{"megatron-22b", 1, 1, 4, 8, 59.25, 9.5625, 66.84, 49.42, 16.18, 7.64},
		{"megatron-175b", 8, 3, 1, 64, 66.84375, 12.3515625, 62.04, 56.53, 18.49, 8.71},
		{"megatron-530b", 35, 3, 1, 280, 114.0234375, 23.076171875, 58.31, 62.04, 20.27, 9.42},
		{"megatron-1t", 64, 1, 1, 512, 131.25, 26.5625, 58.31, 62.04, 20.27, 9.42},
	}
}

func (k korthikantiShape) plan(sp bool, rc Recompute) Plan {
	p := Plan{DP: 1, TP: 8, PP: k.pp, CP: 1, VPP: k.vpp, MBS: k.mbs, SP: sp, Recompute: rc,
		Precision: BF16, Schedule: OneFOneB, Order: "tp-cp-dp-pp"}
	if k.vpp > 1 {
		p.Schedule = Interleaved
	}
	return p
}

// korthikantiRow is one comparison of the set the issue names: a published
// figure, the planner's, and the relative error.
type korthikantiRow struct {
	what          string
	published, us float64
}

func (r korthikantiRow) err() float64 { return r.us/r.published - 1 }

// korthikantiSet is Table 5's eight iteration times (validationSet's
// Korthikanti rows, searched as the authors tuned theirs), Figure 1's eight
// first-stage activation sizes (the planner's M_act of that stage less the
// transient working set of a recomputed layer: the figure counts what is
// stored; M_act with it is 8.9% over the 22B sp+sel bar) and
// Figure 7's sixteen per-layer percentages (the planner's per-layer stash
// against its tensor-parallel baseline; the baseline's own 100% is left
// out, it cannot miss).
func korthikantiSet(t *testing.T) []korthikantiRow {
	var rows []korthikantiRow
	for _, v := range validationSet() {
		if strings.HasPrefix(v.source, "Korthikanti") {
			got, _ := v.predict(t)
			rows = append(rows, korthikantiRow{"T5 " + strings.TrimPrefix(v.source, "Korthikanti 2022 T5 ") + " " + v.model, v.value, got})
		}
	}
	for _, k := range korthikantiShapes() {
		j := job(t, k.model, "dgx-a100", k.gpus, 2048, k.gpus*k.mbs)
		for _, c := range []struct {
			name string
			sp   bool
			rc   Recompute
			pub  float64
		}{{"none", false, RecomputeNone, k.fig1None}, {"sp+sel", true, RecomputeSelective, k.fig1SeqSel}} {
			p := k.plan(c.sp, c.rc)
			if err := j.Check(p); err != nil {
				t.Fatal(err)
			}
			stored := float64(j.Memory(p).Act) - j.activations(p).working
			rows = append(rows, korthikantiRow{"F1 " + c.name + " " + k.model, c.pub, stored / gib})
		}
		base := j.activations(k.plan(false, RecomputeNone)).layer
		for _, c := range []struct {
			name string
			sp   bool
			rc   Recompute
			pub  float64
		}{{"sp", true, RecomputeNone, k.fig7Seq}, {"sel", false, RecomputeSelective, k.fig7Sel},
			{"sp+sel", true, RecomputeSelective, k.fig7SeqSel}, {"full", false, RecomputeFull, k.fig7Full}} {
			got := 100 * j.activations(k.plan(c.sp, c.rc)).layer / base
			rows = append(rows, korthikantiRow{"F7 " + c.name + " " + k.model, c.pub, got})
		}
	}
	return rows
}

// TestKorthikantiSet holds the bound on Korthikanti et al. 2022:
// over Table 5's iteration times and Figures 1 and 7's activation memory,
// mean |error| ≤ 3.5% and max ≤ 8.5% (Calculon: 3.65% / 8.87%), and the
// same bounds on Table 5 alone. Run with -v for the table in
// docs/PLANNER.md.
func TestKorthikantiSet(t *testing.T) {
	rows := korthikantiSet(t)
	if len(rows) != 32 {
		t.Fatalf("%d rows, want 8 + 8 + 16", len(rows))
	}
	check := func(name string, rs []korthikantiRow) {
		sum, worst := 0.0, 0.0
		for _, r := range rs {
			sum += math.Abs(r.err())
			worst = math.Max(worst, math.Abs(r.err()))
		}
		mean := sum / float64(len(rs))
		t.Logf("%s: %d rows, mean |error| %.2f%%, max %.2f%%", name, len(rs), 100*mean, 100*worst)
		if mean > 0.035 || worst > 0.085 {
			t.Errorf("%s: mean |error| %.2f%% (bound 3.5%%), max %.2f%% (bound 8.5%%)", name, 100*mean, 100*worst)
		}
	}
	for _, r := range rows {
		t.Logf("| %s | %.4g | %.4g | %+.2f%% |", r.what, r.published, r.us, 100*r.err())
	}
	check("Table 5, Figures 1 and 7", rows)
	check("Table 5 alone", rows[:8])
}
