package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
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
