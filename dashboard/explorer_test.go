package dashboard

import (
	"html/template"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"trellis/plan"
)

func presetJob(in PlanInputs) (plan.Job, error) {
	m, err := plan.ModelPreset(in.Model)
	if err != nil {
		return plan.Job{}, err
	}
	c, err := plan.ClusterPreset(in.Cluster)
	if err != nil {
		return plan.Job{}, err
	}
	j := plan.Job{Model: m, Cluster: c, Devices: in.Devices, Seq: in.Seq, GlobalBatch: in.Batch}
	return j, j.Validate()
}

var bestRe = regexp.MustCompile(`<tr class="best" data-plan="([^"]*)"`)

func TestExplorer(t *testing.T) {
	srv := httptest.NewServer(Explorer(ExplorerConfig{Job: presetJob,
		Defaults: PlanInputs{Model: "gpt2", Cluster: "dgx-h100", Devices: 8, Seq: 1024, Batch: 64}}))
	defer srv.Close()
	get := func(q string) string {
		resp, err := http.Get(srv.URL + "/" + q)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	best := func(in PlanInputs) string {
		j, err := presetJob(in)
		if err != nil {
			t.Fatal(err)
		}
		fix, err := plan.ParseFix(in.Fix)
		if err != nil {
			t.Fatal(err)
		}
		res, err := j.Search(plan.Options{Fix: fix, Top: 1})
		if err != nil || len(res.Plans) == 0 {
			t.Fatalf("search: %v", err)
		}
		return res.Plans[0].Plan.String()
	}
	for _, c := range []struct {
		name, query string
		in          PlanInputs
		want        []string // substrings of the page
	}{
		{"defaults", "", PlanInputs{Model: "gpt2", Cluster: "dgx-h100", Devices: 8, Seq: 1024, Batch: 64},
			[]string{`id="plan-memory-chart"`, `id="plan-time-chart"`, `data-kind="predicted" data-tag="act"`}},
		{"inputs", "?model=llama3-8b&devices=16&seq=4096&batch=32", PlanInputs{Model: "llama3-8b", Cluster: "dgx-h100", Devices: 16, Seq: 4096, Batch: 32},
			[]string{"llama3-8b on 16"}},
		{"pinned", "?fix=tp%3D2", PlanInputs{Model: "gpt2", Cluster: "dgx-h100", Devices: 8, Seq: 1024, Batch: 64, Fix: "tp=2"},
			[]string{`id="pinned-table"`, `<tr class="changed" data-key="tp">`}},
	} {
		page := get(c.query)
		m := bestRe.FindStringSubmatch(page)
		if m == nil {
			t.Errorf("%s: no best plan on the page", c.name)
			continue
		}
		if want := best(c.in); m[1] != want {
			t.Errorf("%s: best plan %s, the search says %s", c.name, m[1], want)
		}
		for _, w := range c.want {
			if !strings.Contains(page, w) {
				t.Errorf("%s: page lacks %q", c.name, w)
			}
		}
	}
	for _, c := range []struct{ query, want string }{
		{"?devices=x", `devices=&#34;x&#34;: want a whole number`},
		{"?model=nope", `no model preset`},
		{"?fix=tp%3D3", `id="plan-error"`},
	} {
		if page := get(c.query); !strings.Contains(page, c.want) {
			t.Errorf("%s: page lacks %q", c.query, c.want)
		}
	}
}

func TestAddPin(t *testing.T) {
	for _, c := range []struct{ fix, kv, want string }{
		{"", "tp=2", "tp=2"}, {"pp=2", "tp=2", "pp=2,tp=2"}, {"tp=4,pp=2", "tp=2", "pp=2,tp=2"},
	} {
		if got := addPin(c.fix, c.kv); got != c.want {
			t.Errorf("addPin(%q, %q) = %q, want %q", c.fix, c.kv, got, c.want)
		}
	}
}

// The explorer marks each plan, and the best overall beside the pinned
// best, with whether the CPU engine runs it (plan.Job.EngineRefusals).
func TestExplorerMarksEnginePlans(t *testing.T) {
	page := func(in PlanInputs) (plan.Job, string) {
		j, err := presetJob(in)
		if err != nil {
			t.Fatal(err)
		}
		_, ps, err := explore(ExplorerConfig{Job: presetJob}, in, nil)
		if err != nil {
			t.Fatal(err)
		}
		var html strings.Builder
		for _, p := range ps {
			html.WriteString(string(p.HTML))
		}
		return j, html.String()
	}
	_, runs := page(PlanInputs{Model: "gpt2", Cluster: "dgx-h100", Devices: 8, Seq: 1024, Batch: 64, Fix: "zero=1"})
	j, refused := page(PlanInputs{Model: "qwen3-30b-a3b", Cluster: "dgx-h100", Devices: 16, Seq: 4096, Batch: 64, Fix: "tp=2"})
	res, err := j.Search(plan.Options{Top: 1})
	if err != nil || len(res.Plans) == 0 {
		t.Fatal(err)
	}
	free := strings.Join(j.EngineRefusals(res.Plans[0].Plan), "; ")
	if free == "" {
		t.Fatalf("the best plan overall, %s, runs on the engine: pick a job whose best does not", res.Plans[0].Plan)
	}
	for _, c := range []struct{ page, want string }{
		{runs, `<th>CPU engine</th>`}, {runs, `<td class="engine-runs">runs</td>`},
		{refused, `<tr><th>CPU engine</th><td class="engine-refused"`}, {refused, "no: " + template.HTMLEscapeString(free)},
	} {
		if !strings.Contains(c.page, c.want) {
			t.Errorf("explorer page lacks %q", c.want)
		}
	}
}
