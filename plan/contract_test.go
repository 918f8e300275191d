package plan

import (
	"fmt"
	"strings"
	"testing"
)

// On a cluster of engine ranks (engine_stash) the search keeps only plans
// EngineRefusals accepts and counts the others under the refusal; the
// issue's job (GPT-2 on 2 devices of the CPU host) ranked cp=2 first.
func TestEngineClusterSearchKeepsEnginePlans(t *testing.T) {
	j := Job{Model: presetModel(t, "gpt2"), Cluster: cpuHostCluster(t), Devices: 2, Seq: 1024, GlobalBatch: 8}
	res, err := j.Search(Options{Top: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Plans) == 0 {
		t.Fatal("no plan")
	}
	for _, e := range res.Plans {
		if r := j.EngineRefusals(e.Plan); len(r) > 0 {
			t.Errorf("printed %s, which the engine refuses: %v", e.Plan.Short(), r)
		}
		for _, v := range e.Variants {
			if r := j.EngineRefusals(v); len(r) > 0 {
				t.Errorf("variant %s, which the engine refuses: %v", v.Short(), r)
			}
		}
	}
	n := 0
	for k, v := range res.Rejected {
		if strings.HasPrefix(k, rejEnginePrefix) {
			n += v
		}
	}
	if n == 0 {
		t.Errorf("no candidate counted as refused by the engine: %v", res.Rejected)
	}
	// A plan the engine refuses (found through the table, not named here:
	// the engine's features grow).
	refused := ""
	for _, p := range []string{"dp=1,cp=2", "pp=2,schedule=dualpipe", "dp=2,precision=fp8"} {
		if pl, err := Parse(p); err == nil && len(j.EngineRefusals(pl)) > 0 {
			refused = p
			break
		}
	}
	if refused == "" {
		t.Fatal("no candidate plan the engine refuses: extend the list")
	}
	if got := j.Explain(mustParse(t, refused), &res.Plans[0]); !strings.Contains(got, "rejected: the cluster's ranks run the Trellis engine") {
		t.Errorf("--explain of %s, refused on engine ranks:\n%s", refused, got)
	}
	// A model the engine does not run (multi-head latent attention): no
	// plan, and the advice says why.
	j.Model = presetModel(t, "deepseek-v2-lite")
	j.Devices, j.Seq = 8, 256
	res, err = j.Search(Options{Top: 5})
	if err != nil {
		t.Fatal(err)
	}
	if adv := j.Advice(res, Options{Top: 5}); len(res.Plans) != 0 || len(adv) == 0 || !strings.Contains(adv[0], "engine") {
		t.Errorf("deepseek-v2-lite on engine ranks: %d plans, advice %q", len(res.Plans), adv)
	}
}

// On a GPU preset each printed plan says whether the CPU engine runs it,
// in the table, in --explain and in the JSON.
func TestGPUPresetMarksEnginePlans(t *testing.T) {
	c, err := ClusterPreset("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	j := Job{Model: presetModel(t, "llama3-8b"), Cluster: c, Devices: 8, Seq: 8192, GlobalBatch: 64}
	for _, fix := range []string{"", "precision=bf16,cp=1"} {
		f, err := ParseFix(fix)
		if err != nil {
			t.Fatal(err)
		}
		res, err := j.Search(Options{Fix: f, Top: 4})
		if err != nil || len(res.Plans) == 0 {
			t.Fatalf("%q: %v", fix, err)
		}
		tab, rep := j.Table(res), j.Report(res)
		for i, e := range res.Plans {
			r := j.EngineRefusals(e.Plan)
			want := "runs on the CPU engine"
			if len(r) > 0 {
				want = "not on the CPU engine: " + strings.Join(r, "; ")
			}
			row := tab[strings.Index(tab, fmt.Sprintf("\n%d  %s\n", i+1, e.Plan.Short())):]
			if k := strings.Index(row[1:], fmt.Sprintf("\n%d  ", i+2)); k > 0 {
				row = row[:k+2]
			}
			if !strings.Contains(row, "\n   "+want+"\n") {
				t.Errorf("%q: table row %d lacks %q:\n%s", fix, i+1, want, tab)
			}
			if ex := j.Explain(e.Plan, &res.Plans[0]); !strings.Contains(ex, "engine: "+want+"\n") {
				t.Errorf("%q: --explain %s lacks %q", fix, e.Plan.Short(), want)
			}
			if js := rep.Plans[i]; js.EngineRuns != (len(r) == 0) || len(js.EngineRefusals) != len(r) {
				t.Errorf("%q: JSON plan %d: engine_runs=%v refusals %v, want %v", fix, i+1, js.EngineRuns, js.EngineRefusals, r)
			}
		}
	}
}

func presetModel(t *testing.T, name string) Model {
	t.Helper()
	m, err := ModelPreset(name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
