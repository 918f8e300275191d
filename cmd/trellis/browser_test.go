package main

// Browser tests: the pages in headless Chromium, driven by chromedp. They
// skip, saying so, where no browser is installed (Debian: apt-get install
// chromium); .ci/run installs one. They run serially, one browser each.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"trellis/plan"
	"trellis/train"
	"trellis/viz"
)

// page is a headless browser tab that records console errors and requests.
type page struct {
	ctx      context.Context
	mu       sync.Mutex
	errors   []string
	requests []string
}

func (p *page) errs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.errors...)
}

func (p *page) reqs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.requests...)
}

// browser starts headless Chromium, or skips the test when there is none
// (fails instead when TRELLIS_BROWSER_TESTS=require, as in CI).
func browser(t testing.TB) context.Context {
	t.Helper()
	exe := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			exe = p
			break
		}
	}
	if exe == "" {
		if os.Getenv("TRELLIS_BROWSER_TESTS") == "require" {
			t.Fatal("TRELLIS_BROWSER_TESTS=require and no chromium on PATH")
		}
		t.Skip("browser test skipped: no chromium on PATH (Debian: apt-get install chromium)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU)
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	return actx
}

// newPage opens a tab of the browser.
func newPage(t *testing.T, browser context.Context) *page {
	t.Helper()
	p := &page{}
	ctx, cancel := chromedp.NewContext(browser, chromedp.WithListener(func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok {
			p.mu.Lock()
			p.requests = append(p.requests, e.Request.URL)
			p.mu.Unlock()
		}
	}))
	t.Cleanup(cancel)
	p.ctx = ctx
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				p.mu.Lock()
				p.errors = append(p.errors, m.String())
				p.mu.Unlock()
			}
		}
	}()
	return p
}

// TestBrowser runs the browser tests serially in one Chromium, a tab each.
func TestBrowser(t *testing.T) {
	b := browser(t)
	t.Run("dashboard", func(t *testing.T) { testDashboard(t, newPage(t, b)) })
	t.Run("report", func(t *testing.T) { testReport(t, newPage(t, b)) })
	t.Run("plan-explorer", func(t *testing.T) { testPlanExplorer(t, newPage(t, b)) })
}

// eval runs a JavaScript expression, failing the test on error.
func eval[T any](t *testing.T, p *page, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// waitJS polls a JavaScript predicate until it is true.
func waitJS(t *testing.T, p *page, expr string) {
	t.Helper()
	if _, err := chromedp.Run(p.ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(60*time.Second))); err != nil {
		t.Fatalf("waiting for %s: %v", expr, err)
	}
}

const lossPoints = `document.querySelector('#loss-chart polyline[data-series="train"]')?.points.numberOfItems ?? 0`

// memSegs reads the memory chart's measured segments: "rank/tag" -> bytes.
const memSegs = `Object.fromEntries([...document.querySelectorAll('#memory-chart rect.seg[data-kind="measured"]')].map(r => [r.dataset.rank + "/" + r.dataset.tag, Number(r.dataset.value)]))`

// checkMemory holds the chart's bars against a --metrics line.
func checkMemory(t *testing.T, p *page, line []byte) {
	t.Helper()
	s, err := viz.ParseStep(line)
	if err != nil {
		t.Fatal(err)
	}
	got := eval[map[string]float64](t, p, memSegs)
	if len(got) != len(s.Ranks)*len(viz.Tags()) {
		t.Errorf("step %d: %d memory segments, want %d", s.Step, len(got), len(s.Ranks)*len(viz.Tags()))
	}
	for _, rk := range s.Ranks {
		for _, tag := range viz.Tags() {
			if v := got[fmt.Sprintf("%d/%s", rk.Rank, tag)]; v != float64(rk.Tag(tag)) {
				t.Errorf("step %d: rank %d %s bar %g, --metrics says %d", s.Step, rk.Rank, tag, v, rk.Tag(tag))
			}
		}
	}
}

// stepSegs reads the step-time chart's segments: "rank/part" -> seconds.
const stepSegs = `Object.fromEntries([...document.querySelectorAll('#steptime-chart rect.seg')].map(r => [r.dataset.rank + "/" + r.dataset.tag, Number(r.dataset.value)]))`

// checkStepTime holds the step-time chart against --metrics lines: each
// rank's measured parts when the lines have them, else the older split.
func checkStepTime(t *testing.T, p *page, lines [][]byte) {
	t.Helper()
	if d := sameSplit(eval[map[string]float64](t, p, stepSegs), wantSplit(t, lines)); d != "" {
		t.Errorf("step %d: step-time chart: %s", len(lines), d)
	}
}

// gate holds the training loop after step `at` until released, so the
// test can look at the page mid-run.
type gate struct {
	train.Observer
	at      int
	reached chan struct{}
	release chan struct{}
}

func (g gate) Step(line []byte) {
	g.Observer.Step(line)
	if s, err := viz.ParseStep(line); err == nil && s.Step == g.at {
		close(g.reached)
		<-g.release
	}
}

func metricsLines(t *testing.T, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Split(bytes.TrimSpace(b), []byte("\n"))
}

// testDashboard: a real run's dashboard shows a loss point per step
// logged and memory bars equal to --metrics, mid-run and after it, and
// updates in place while the run goes on.
func testDashboard(t *testing.T, p *page) {
	const steps, mid = 6, 3
	path := filepath.Join(t.TempDir(), "run.jsonl")
	mf, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer mf.Close()
	opts := train.Options{Job: tinyJob(steps), Metrics: mf}
	d, err := startDashboard("127.0.0.1:0", &opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := gate{Observer: opts.Observer, at: mid, reached: make(chan struct{}), release: make(chan struct{})}
	opts.Observer = g
	done := make(chan error, 1)
	go func() {
		_, err := train.Run(context.Background(), opts)
		d.finish(err)
		done <- err
	}()
	<-g.reached
	if err := chromedp.Do(p.ctx, chromedp.Navigate(d.url)); err != nil {
		close(g.release)
		t.Fatal(err)
	}
	waitJS(t, p, fmt.Sprintf("(%s) === %d", lossPoints, mid))
	checkMemory(t, p, metricsLines(t, path)[mid-1])
	checkStepTime(t, p, metricsLines(t, path)[:mid])
	eval[bool](t, p, `window.__same = [document.getElementById("loss"), document.getElementById("loss-chart")]; true`)
	close(g.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitJS(t, p, fmt.Sprintf(`(%s) === %d && document.body.dataset.ended === "true"`, lossPoints, steps))
	lines := metricsLines(t, path)
	if len(lines) != steps {
		t.Fatalf("--metrics has %d lines, want %d", len(lines), steps)
	}
	checkMemory(t, p, lines[steps-1])
	checkStepTime(t, p, lines)
	if !eval[bool](t, p, `window.__same[0] === document.getElementById("loss")`) {
		t.Error("the page was reloaded; want updates in place")
	}
	if !eval[bool](t, p, `window.__same[1] === document.getElementById("loss-chart")`) {
		t.Error("the loss chart was replaced; want its changed attributes patched in place")
	}
	if n := eval[int](t, p, `document.querySelectorAll('#samples .sample').length`); n != 2 {
		t.Errorf("%d samples shown, want 2 (steps 3 and 6)", n)
	}
	if e := p.errs(); len(e) > 0 {
		t.Errorf("console errors: %q", e)
	}
}

// testReport: a finished run's report renders from a file with no
// request beyond the file itself and no console error.
func testReport(t *testing.T, p *page) {
	metrics := tinyRun(t, 5)
	out := filepath.Join(t.TempDir(), "report.html")
	if err := runReport(metrics, reportFlags{out: out}); err != nil {
		t.Fatal(err)
	}
	url := "file://" + out
	if err := chromedp.Do(p.ctx, chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
	if n := eval[int](t, p, lossPoints); n != 5 {
		t.Errorf("%d loss points, want 5", n)
	}
	checkMemory(t, p, metricsLines(t, metrics)[4])
	if n := eval[int](t, p, `document.querySelectorAll('svg.chart').length`); n < 6 {
		t.Errorf("%d charts rendered, want at least 6", n)
	}
	reqs := p.reqs()
	if len(reqs) == 0 {
		t.Error("no request seen at all: the request listener is not working")
	}
	for _, r := range reqs {
		if r != url && !strings.HasPrefix(r, "data:") {
			t.Errorf("the report requested %s", r)
		}
	}
	// A file with the measured split: each rank's four parts.
	split := splitMetrics(t, 4)
	if err := runReport(split, reportFlags{out: out}); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(p.ctx, chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
	checkStepTime(t, p, metricsLines(t, split))
	if e := p.errs(); len(e) > 0 {
		t.Errorf("console errors: %q", e)
	}
}

// testPlanExplorer: the explorer's best plan is `trellis plan
// --json`'s first, for the flags' inputs and for inputs typed in the form.
func testPlanExplorer(t *testing.T, p *page) {
	f := planFlags{model: "gpt2", cluster: "dgx-h100", devices: 8, seq: 1024, batch: 64, top: 5}
	srv := httptest.NewServer(newExplorer(f))
	defer srv.Close()
	best := func(f planFlags) plan.PlanJSON {
		f.json = true
		var b bytes.Buffer
		if err := runPlan(&b, io.Discard, f); err != nil {
			t.Fatal(err)
		}
		var r plan.ReportJSON
		if err := json.Unmarshal(b.Bytes(), &r); err != nil || len(r.Plans) == 0 {
			t.Fatalf("plan --json: %v, %d plans", err, len(r.Plans))
		}
		return r.Plans[0].Plan
	}
	shown := func() plan.PlanJSON {
		txt := eval[string](t, p, `document.querySelector('tr.best').dataset.plan`)
		pl, err := plan.Parse(txt)
		if err != nil {
			t.Fatalf("shown plan %q: %v", txt, err)
		}
		return pl.JSON()
	}
	if err := chromedp.Do(p.ctx, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatal(err)
	}
	if got, want := shown(), best(f); got != want {
		t.Errorf("explorer shows %+v, trellis plan --json %+v", got, want)
	}
	// Typed into the form and submitted.
	f2 := f
	f2.model, f2.devices, f2.seq, f2.batch = "llama3-8b", 16, 4096, 32
	if err := chromedp.Do(p.ctx,
		chromedp.SetValue(`input[name="model"]`, f2.model), chromedp.SetValue(`input[name="devices"]`, "16"),
		chromedp.SetValue(`input[name="seq"]`, "4096"), chromedp.SetValue(`input[name="batch"]`, "32")); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.RunResponse(p.ctx, chromedp.Click(`button[type="submit"]`)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, p, `document.getElementById("status").textContent.startsWith("llama3-8b on 16")`)
	if got, want := shown(), best(f2); got != want {
		t.Errorf("after the form: explorer shows %+v, trellis plan --json %+v", got, want)
	}
	if n := eval[int](t, p, `document.querySelectorAll('#plan-memory-chart rect.seg[data-tag="param"]').length`); n != 5 {
		t.Errorf("%d memory bars, want 5", n)
	}
	if e := p.errs(); len(e) > 0 {
		t.Errorf("console errors: %q", e)
	}
}
