package viz

import (
	"math"
	"strings"
	"testing"
	"time"
)

// svgFinite reports whether an SVG holds no NaN or Inf coordinate.
func svgFinite(s string) bool { return !strings.Contains(s, "NaN") && !strings.Contains(s, "Inf") }

// FuzzReadMetrics feeds any text to the report's metrics reader and draws
// what it accepts: no panic, every chart finite, and the whole report
// drawn in bounded time (issue 29: metrics spanning ±1e308 never finished).
//
//	go test ./viz -run '^$' -fuzz FuzzReadMetrics -fuzztime 30s
func FuzzReadMetrics(f *testing.F) {
	f.Add(`{"step":1,"loss":2.5,"lr":0.001,"tokens_per_s":1000,"mfu":0.1,"step_s":0.5,"budget":1048576,"ranks":[{"rank":0,"param":10,"grad":20,"optim":40,"act":80,"workspace":5,"comm":7,"peak":150,"comm_wait_s":0.1}]}`)
	f.Add(`{"step":1,"loss":-1e308}` + "\n" + `{"step":2,"loss":1e308,"lr":1e308,"step_s":1e308}`)
	f.Add(`{"step":1,"loss":1e300}` + "\n" + `{"step":2,"loss":1.0000000000000002e300}`)
	f.Add(`{"step":9223372036854775807,"val_loss":5e-324,"skipped":true,"loss_scale":1e308}`)
	f.Fuzz(func(t *testing.T, text string) {
		steps, err := ReadMetrics(strings.NewReader(text))
		if err != nil || len(steps) == 0 || len(steps) > 64 {
			return
		}
		start := time.Now()
		var b strings.Builder
		if err := WriteHTML(&b, Page{Title: "t", Panels: Panels(&Run{Steps: steps, Live: true})}); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%d steps drawn in %v", len(steps), d)
		}
		if !svgFinite(b.String()) {
			t.Errorf("a chart holds NaN or Inf for %q", text)
		}
	})
}

// FuzzParseTrace feeds any bytes to the report's trace reader and draws
// the timeline of what it accepts: no panic, finite coordinates, bounded
// time (issue 29: an event whose ts+dur overflowed hung the report).
//
//	go test ./viz -run '^$' -fuzz FuzzParseTrace -fuzztime 30s
func FuzzParseTrace(f *testing.F) {
	f.Add([]byte(`{"traceEvents":[{"name":"forward","ph":"X","ts":0,"dur":40,"pid":0,"tid":0},{"name":"wait","ph":"X","ts":40,"dur":60,"pid":1,"tid":0}]}`))
	f.Add([]byte(`[{"name":"a","ph":"X","ts":1e308,"dur":1e308,"pid":0,"tid":0}]`))
	f.Add([]byte(`[{"name":"a","ph":"X","ts":-1e308,"dur":1,"pid":0,"tid":0},{"name":"b","ph":"X","ts":1e308,"dur":1,"pid":0,"tid":0}]`))
	f.Add([]byte(`[{"name":"a","ph":"X","ts":1e300,"dur":1e-300,"pid":-1,"tid":9223372036854775807}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := ParseTrace(data)
		if err != nil || len(tr.Events) > 256 {
			return
		}
		start := time.Now()
		svg := tr.TimelineSVG(800)
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%d events drawn in %v", len(tr.Events), d)
		}
		if !svgFinite(svg) {
			t.Errorf("the timeline holds NaN or Inf for %q", data)
		}
		for pid, u := range tr.Utilisation() {
			if math.IsNaN(u) || u < 0 || u > 1+1e-9 {
				t.Errorf("pid %d: utilisation %g", pid, u)
			}
		}
	})
}
