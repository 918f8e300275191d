package dashboard

import (
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"trellis/plan"
	"trellis/viz"
)

// PlanInputs are the explorer form's fields, as `trellis plan` takes them.
type PlanInputs struct {
	Model, Cluster string
	Devices        int // 0: one node of the cluster
	Seq, Batch     int // tokens per sequence; sequences per step
	Fix            string
	Top            int
}

// ExplorerConfig configures the plan explorer.
type ExplorerConfig struct {
	// Job builds the planner's job from the inputs, the way `trellis plan`
	// does (presets or files), so that both show the same plans.
	Job      func(PlanInputs) (plan.Job, error)
	Defaults PlanInputs
	Log      *slog.Logger
	// SearchTimeout bounds one page's searches (default 10s); Searches
	// bounds the searches running at once (default 2), a request waiting
	// for one at most SearchTimeout; Cache is how many pages' results are
	// kept (default 64), so a reload or a shared link costs no search.
	SearchTimeout time.Duration
	Searches      int
	Cache         int
}

// Explorer serves the plan explorer at GET /: a form (model, cluster,
// devices, seq, batch, pinned keys, top), the best plans that fit with
// their memory by tag against the budget and their step time split, and,
// when keys are pinned, what changed against the best unpinned plan. Each
// key=value of a plan is a link that pins it.
func Explorer(cfg ExplorerConfig) http.Handler {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.SearchTimeout <= 0 {
		cfg.SearchTimeout = 10 * time.Second
	}
	if cfg.Searches <= 0 {
		cfg.Searches = 2
	}
	if cfg.Cache <= 0 {
		cfg.Cache = 64
	}
	x := &searches{cfg: cfg, slots: make(chan struct{}, cfg.Searches), cache: map[PlanInputs]explored{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		in, err := inputsFrom(r.URL.Query(), cfg.Defaults)
		page := viz.Page{Title: "trellis plan explorer", Header: form(in)}
		if err == nil {
			page.Status, page.Panels, err = x.explore(r.Context(), in)
		}
		if err != nil {
			page.Status = ""
			page.Panels = []viz.Panel{{ID: "error", Title: "No plans", Wide: true,
				HTML: template.HTML(`<p class="error" id="plan-error">` + template.HTMLEscapeString(err.Error()) + `</p>`)}}
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if werr := viz.WriteHTML(w, page); werr != nil {
			cfg.Log.Warn("plan explorer: page", "err", werr)
		}
	})
	return mux
}

// inputsFrom reads the query over the defaults; a bad number names its field.
func inputsFrom(q url.Values, d PlanInputs) (PlanInputs, error) {
	in := d
	str := func(key string, dst *string) {
		if v := strings.TrimSpace(q.Get(key)); v != "" || q.Has(key) && key == "fix" {
			*dst = v
		}
	}
	str("model", &in.Model)
	str("cluster", &in.Cluster)
	str("fix", &in.Fix)
	for _, f := range []struct {
		key string
		dst *int
	}{{"devices", &in.Devices}, {"seq", &in.Seq}, {"batch", &in.Batch}, {"top", &in.Top}} {
		v := strings.TrimSpace(q.Get(f.key))
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return in, fmt.Errorf("%s=%q: want a whole number >= 0", f.key, v)
		}
		*f.dst = n
	}
	if in.Top == 0 {
		in.Top = 5
	}
	if in.Top > 50 {
		return in, fmt.Errorf("top=%d: at most 50 plans are shown", in.Top)
	}
	return in, nil
}

func (in PlanInputs) query(fix string) string {
	v := url.Values{}
	v.Set("model", in.Model)
	v.Set("cluster", in.Cluster)
	v.Set("devices", strconv.Itoa(in.Devices))
	v.Set("seq", strconv.Itoa(in.Seq))
	v.Set("batch", strconv.Itoa(in.Batch))
	v.Set("top", strconv.Itoa(in.Top))
	v.Set("fix", fix)
	return "?" + v.Encode()
}

func form(in PlanInputs) template.HTML {
	var b strings.Builder
	b.WriteString(`<form class="inputs" method="get" action="">`)
	field := func(name, label, val, hint string) {
		fmt.Fprintf(&b, `<label>%s <input name="%s" value="%s" title="%s" list="%s-choices"></label>`,
			label, name, template.HTMLEscapeString(val), template.HTMLEscapeString(hint), name)
	}
	for _, l := range []struct {
		id    string
		names []string
	}{{"model", plan.ModelPresetNames()}, {"cluster", plan.ClusterPresetNames()}} {
		fmt.Fprintf(&b, `<datalist id="%s-choices">`, l.id)
		for _, n := range l.names {
			fmt.Fprintf(&b, `<option value="%s">`, template.HTMLEscapeString(n))
		}
		b.WriteString(`</datalist>`)
	}
	field("model", "model", in.Model, "preset: "+strings.Join(plan.ModelPresetNames(), ", "))
	field("cluster", "cluster", in.Cluster, "preset: "+strings.Join(plan.ClusterPresetNames(), ", "))
	field("devices", "devices", strconv.Itoa(in.Devices), "0: one node")
	field("seq", "seq", strconv.Itoa(in.Seq), "tokens per sequence")
	field("batch", "global batch", strconv.Itoa(in.Batch), "sequences per step")
	field("fix", "pinned", in.Fix, "e.g. tp=8,zero=1")
	field("top", "top", strconv.Itoa(in.Top), "plans shown")
	b.WriteString(`<button type="submit">plan</button></form>`)
	return template.HTML(b.String())
}

// explore runs the search (and, with pinned keys, the unpinned one too) and
// renders the panels. stop ends the searches early (plan.ErrStopped).
func explore(cfg ExplorerConfig, in PlanInputs, stop <-chan struct{}) (string, []viz.Panel, error) {
	job, err := cfg.Job(in)
	if err != nil {
		return "", nil, err
	}
	fix, err := plan.ParseFix(in.Fix)
	if err != nil {
		return "", nil, fmt.Errorf("pinned: %w", err)
	}
	res, err := job.Search(plan.Options{Fix: fix, Top: in.Top, Stop: stop})
	if err != nil {
		return "", nil, err
	}
	status := fmt.Sprintf("%s on %d × %s: %d plans evaluated, %d fit", job.Model.Name, job.Devices, job.Cluster.Name, res.Evaluated, res.Fitting)
	if len(res.Plans) == 0 {
		return status, nil, fmt.Errorf("no plan fits: %s", rejected(res))
	}
	ps := []viz.Panel{plansPanel(in, job, res), planMemoryPanel(res), planTimePanel(res)}
	if in.Fix != "" {
		free, err := job.Search(plan.Options{Top: 1, Stop: stop})
		if errors.Is(err, plan.ErrStopped) {
			return "", nil, err
		}
		if err == nil && len(free.Plans) > 0 {
			ps = append(ps, pinnedPanel(in.Fix, job, res.Plans[0], free.Plans[0]))
		}
	}
	return status, ps, nil
}

func rejected(res plan.Result) string {
	var parts []string
	for _, k := range res.RejectedReasons() {
		parts = append(parts, fmt.Sprintf("%s: %d", k, res.Rejected[k]))
	}
	if len(parts) == 0 {
		return "no candidates"
	}
	return "candidates rejected by rule: " + strings.Join(parts, ", ")
}
