package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"trellis/data"
	"trellis/train"
	"trellis/viz"
)

// tinyJob trains in well under a second: two data-parallel ranks with
// ZeRO-1, a sample and a validation every 3 steps.
func tinyJob(steps int) train.Job {
	j := train.DefaultJob()
	j.Model.Layers, j.Model.Hidden, j.Model.Heads, j.Model.SeqLen = 1, 32, 2, 16
	j.Parallel.Plan, j.Parallel.DeviceMemory = "dp=2,zero=1", "1MiB"
	j.Train.MicroBatch, j.Train.GlobalBatch, j.Train.Steps, j.Train.Warmup = 2, 4, steps, 1
	j.Train.EvalEvery, j.Train.EvalBatches, j.Train.SampleEvery, j.Train.SampleLen, j.Train.Threads = 3, 1, 3, 8, 1
	j.Data.CacheDir = data.CacheOff
	j.Checkpoint.Dir = ""
	return j
}

// tinyRun trains tinyJob(steps) in this process and returns its --metrics file.
func tinyRun(t *testing.T, steps int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "run.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := train.Run(context.Background(), train.Options{Job: tinyJob(steps), Metrics: f}); err != nil {
		t.Fatal(err)
	}
	return path
}

const traceJSON = `{"traceEvents":[{"name":"forward","ph":"X","ts":0,"dur":40,"pid":0,"tid":0},{"name":"backward","ph":"X","ts":40,"dur":60,"pid":1,"tid":0}]}`

func TestReport(t *testing.T) {
	metrics := tinyRun(t, 4)
	withTrace := t.TempDir()
	if err := os.WriteFile(filepath.Join(withTrace, "trace.json"), []byte(traceJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, trace string
		timeline    bool
	}{{"no trace flag", "", false}, {"trace dir without trace.json", t.TempDir(), false}, {"trace", withTrace, true}} {
		out := filepath.Join(t.TempDir(), "r.html")
		if err := runReport(metrics, reportFlags{trace: c.trace, out: out}); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		page := string(b)
		if got := strings.Contains(page, `id="timeline-chart"`); got != c.timeline {
			t.Errorf("%s: timeline %v, want %v", c.name, got, c.timeline)
		}
		if !strings.Contains(page, `data-series="train" data-n="4"`) || strings.Count(page, `class="seg" data-rank="1" data-kind="measured"`) != 6 {
			t.Errorf("%s: want 4 loss points and 6 tags for rank 1", c.name)
		}
	}
}

// --vs draws another run's losses beside this run's in the compare panel;
// a --vs file that is not a metrics file is an error naming it, and the
// report may not overwrite it.
func TestReportVersus(t *testing.T) {
	a, b := tinyRun(t, 6), tinyRun(t, 6)
	out := filepath.Join(t.TempDir(), "r.html")
	if err := runReport(a, reportFlags{out: out, vs: []string{b}}); err != nil {
		t.Fatal(err)
	}
	page, _ := os.ReadFile(out)
	if !strings.Contains(string(page), `id="compare-chart"`) || !strings.Contains(string(page), `data-series="run"`) {
		t.Errorf("no compare chart with the other run's series")
	}
	empty := filepath.Join(t.TempDir(), "empty.jsonl")
	os.WriteFile(empty, nil, 0o644)
	if err := runReport(a, reportFlags{out: out, vs: []string{empty}}); err == nil || !strings.Contains(err.Error(), "--vs: "+empty+": no steps") {
		t.Errorf("an empty --vs file: %v", err)
	}
	if err := runReport(a, reportFlags{out: b, vs: []string{b}}); err == nil {
		t.Error("the report overwrote its --vs input")
	}
}

func TestReportErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte(`{"step":1}`+"\n{oops\n"), 0o644)
	empty := filepath.Join(dir, "empty.jsonl")
	os.WriteFile(empty, nil, 0o644)
	badTrace := filepath.Join(dir, "t")
	os.Mkdir(badTrace, 0o755)
	os.WriteFile(filepath.Join(badTrace, "trace.json"), []byte(`[{"ph":"X","ts":1,"dur":-2}]`), 0o644)
	good := filepath.Join(dir, "good.jsonl")
	os.WriteFile(good, []byte(`{"step":1,"ranks":[{"rank":0}]}`+"\n"), 0o644)
	for _, c := range []struct {
		metrics, trace, want string
	}{
		{bad, "", "line 2"},
		{empty, "", "no steps"},
		{filepath.Join(dir, "none.jsonl"), "", "no such file"},
		{good, badTrace, "dur=-2"},
	} {
		out := filepath.Join(dir, "r.html")
		err := runReport(c.metrics, reportFlags{trace: c.trace, out: out})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", c.metrics, err, c.want)
		}
		if _, serr := os.Stat(out); serr == nil {
			t.Errorf("%s: a failed report left %s", c.metrics, out)
		}
	}
}

// TestObserverSeesMetrics: the observer gets exactly the --metrics lines,
// the run's description and its samples.
func TestObserverSeesMetrics(t *testing.T) {
	var metrics bytes.Buffer
	rec := &recorder{}
	if _, err := train.Run(context.Background(), train.Options{Job: tinyJob(6), Metrics: &metrics, Observer: rec}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rec.lines, "\n") + "\n"; got != metrics.String() {
		t.Errorf("observer lines differ from --metrics:\n%s\n%s", got, metrics.String())
	}
	if rec.info.Ranks != 2 || rec.info.Budget != 1<<20 || rec.info.ToStep != 6 || len(rec.info.Groups["dp"]) != 1 || len(rec.info.Groups["dp"][0]) != 2 {
		t.Errorf("run info %+v", rec.info)
	}
	if len(rec.samples) != 2 || !strings.HasPrefix(rec.samples[1], tinyJob(6).Train.Prompt) {
		t.Errorf("samples %q, want two starting with the prompt", rec.samples)
	}
	steps, err := viz.ReadMetrics(&metrics)
	if err != nil || len(steps) != 6 || steps[5].Budget != 1<<20 {
		t.Errorf("metrics: %d steps, %v", len(steps), err)
	}
}

type recorder struct {
	info    train.RunInfo
	lines   []string
	samples []string
}

func (r *recorder) Start(i train.RunInfo)        { r.info = i }
func (r *recorder) Step(b []byte)                { r.lines = append(r.lines, string(b)) }
func (r *recorder) Sample(step int, text string) { r.samples = append(r.samples, text) }

// TestExplorerReadsNoChosenFile: the explorer takes presets and the
// command line's files, never a path typed into the page.
func TestExplorerReadsNoChosenFile(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	os.WriteFile(cfg, []byte(`{"model_type":"gpt2","n_layer":2,"n_embd":64,"n_head":2,"vocab_size":100,"n_positions":128}`), 0o644)
	srv := httptest.NewServer(newExplorer(planFlags{model: cfg, cluster: "dgx-h100", devices: 8, seq: 128, batch: 8, top: 3}))
	defer srv.Close()
	for _, c := range []struct{ query, want string }{
		{"", `class="best"`},                                      // the command line's file
		{"?model=gpt2", `class="best"`},                           // a preset
		{"?model=" + url.QueryEscape(cfg+"x"), "no model preset"}, // any other path
		{"?cluster=" + url.QueryEscape(cfg), "no cluster preset"},
	} {
		resp, err := http.Get(srv.URL + "/" + c.query)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), c.want) {
			t.Errorf("%q: page lacks %q", c.query, c.want)
		}
	}
}

// splitMetrics writes a --metrics file of steps lines, 3 ranks, with the
// measured split (compute_s, comm_wait_s, bubble_s, misc_s, cumulative)
// growing by uneven amounts, and returns its path.
func splitMetrics(t *testing.T, steps int) string {
	t.Helper()
	var b bytes.Buffer
	cum := make([][4]float64, 3)
	for n := 1; n <= steps; n++ {
		var ranks []map[string]any
		for r := range cum {
			x := float64(n*(r+1)) / 100
			for i, d := range []float64{0.2 + x, 0.01 * float64(n%3+r), 0.003 * float64(r), 0.001 + x/10} {
				cum[r][i] += d
			}
			ranks = append(ranks, map[string]any{"rank": r, "param": 100, "grad": 100, "optim": 200, "act": 300 + r, "workspace": 10, "comm": 5, "peak": 700,
				"comm_busy_s": 2 * cum[r][1], "compute_s": cum[r][0], "comm_wait_s": cum[r][1], "bubble_s": cum[r][2], "misc_s": cum[r][3]})
		}
		line, err := json.Marshal(map[string]any{"step": n, "loss": 3 - 0.1*float64(n), "lr": 1e-3, "tokens_per_s": 1000, "mfu": 0.01, "step_s": 0.3, "ranks": ranks})
		if err != nil {
			t.Fatal(err)
		}
		b.Write(append(line, '\n'))
	}
	path := filepath.Join(t.TempDir(), "split.jsonl")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// wantSplit is what the step-time chart should show for --metrics lines:
// "rank/part" -> seconds per step, the mean over the lines after the
// first of each cumulative field's increase. With compute_s the parts are
// the four fields; without (older files), the exposed communication and
// the rest of the step.
func wantSplit(t *testing.T, lines [][]byte) map[string]float64 {
	t.Helper()
	type rank map[string]any
	num := func(r rank, k string) float64 { v, _ := r[k].(float64); return v }
	parse := func(b []byte) (float64, []rank) {
		var l struct {
			StepS float64 `json:"step_s"`
			Ranks []rank  `json:"ranks"`
		}
		if err := json.Unmarshal(b, &l); err != nil {
			t.Fatal(err)
		}
		return l.StepS, l.Ranks
	}
	_, first := parse(lines[0])
	n, step := len(lines)-1, 0.0
	for _, l := range lines[1:] {
		s, _ := parse(l)
		step += s
	}
	if n == 0 {
		n, first = 1, nil
		step, _ = parse(lines[0])
	}
	_, last := parse(lines[len(lines)-1])
	out := map[string]float64{}
	for i, rk := range last {
		mean := func(k string) float64 {
			if first == nil {
				return num(rk, k)
			}
			return (num(rk, k) - num(first[i], k)) / float64(n)
		}
		r := fmt.Sprint(rk["rank"])
		if _, ok := rk["compute_s"]; ok {
			out[r+"/compute"], out[r+"/comm exposed"], out[r+"/bubble"], out[r+"/misc"] = mean("compute_s"), mean("comm_wait_s"), mean("bubble_s"), mean("misc_s")
		} else {
			out[r+"/comm exposed"] = mean("comm_wait_s")
			out[r+"/compute + misc"] = math.Max(0, step/float64(n)-mean("comm_wait_s")-mean("bubble_s"))
		}
	}
	return out
}

// stepTimeSegs reads the step-time chart's segments of a page: "rank/part" -> value.
var stepTimeSeg = regexp.MustCompile(`<rect class="seg" data-rank="(\d+)" data-kind="time" data-tag="([^"]+)" data-value="([^"]+)"`)

// sameSplit compares a chart's segments with wantSplit's, to 1e-9 relative.
func sameSplit(got, want map[string]float64) string {
	if len(got) != len(want) {
		return fmt.Sprintf("segments %v, want %v", got, want)
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || math.Abs(g-w) > 1e-9*math.Max(1e-3, math.Abs(w)) {
			return fmt.Sprintf("%s = %g, want %g (all: %v)", k, g, w, got)
		}
	}
	return ""
}

// TestReportStepTime: the report's step-time chart shows each rank's
// measured parts from a file with the split, and the older two parts from
// a real run's file (whichever fields it has).
func TestReportStepTime(t *testing.T) {
	for _, metrics := range []string{splitMetrics(t, 5), tinyRun(t, 3)} {
		out := filepath.Join(t.TempDir(), "r.html")
		if err := runReport(metrics, reportFlags{out: out}); err != nil {
			t.Fatal(err)
		}
		page, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, m := range stepTimeSeg.FindAllStringSubmatch(string(page), -1) {
			v, err := strconv.ParseFloat(m[3], 64)
			if err != nil {
				t.Fatal(err)
			}
			got[m[1]+"/"+m[2]] = v
		}
		if d := sameSplit(got, wantSplit(t, metricsLines(t, metrics))); d != "" {
			t.Errorf("%s: %s", filepath.Base(metrics), d)
		}
	}
}
