package viz

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// within runs f and fails the test if it has not returned after d (the
// charts of issue 29 never returned).
func within(t *testing.T, d time.Duration, what string, f func() string) string {
	t.Helper()
	done := make(chan string, 1)
	go func() { done <- f() }()
	select {
	case s := <-done:
		return s
	case <-time.After(d):
		t.Fatalf("%s: still drawing after %v", what, d)
		return ""
	}
}

// Issue 29: a report on metrics spanning ±1e308 never finished (the tick
// loop stepped by 1 across the range, or by less than the spacing of
// floats); every axis range must come out finite with a bounded number of
// ticks.
func TestChartExtremeRanges(t *testing.T) {
	next := math.Nextafter(1e300, math.Inf(1))
	for _, c := range []struct {
		name string
		x, y []float64
		log  bool
	}{
		{"±1e308", []float64{1, 2}, []float64{-1e308, 1e308}, false},
		{"±MaxFloat64", []float64{1, 2}, []float64{-math.MaxFloat64, math.MaxFloat64}, false},
		{"one value at MaxFloat64", []float64{1, 2}, []float64{math.MaxFloat64, math.MaxFloat64}, false},
		{"one value at -MaxFloat64", []float64{1}, []float64{-math.MaxFloat64}, false},
		{"1e300 to the next float", []float64{1, 2}, []float64{1e300, next}, false},
		{"x over ±1e308", []float64{-1e308, 1e308}, []float64{1, 2}, false},
		{"log from the smallest float", []float64{1, 2}, []float64{5e-324, 1e308}, true},
	} {
		ch := LineChart{ID: "c", Y: Axis{Log: c.log, Auto: true}, Series: []Series{{Name: "s", X: c.x, Y: c.y}}}
		svg := within(t, 5*time.Second, c.name, ch.SVG)
		for _, bad := range []string{"NaN", "Inf"} {
			if strings.Contains(svg, bad) {
				t.Errorf("%s: the SVG holds %s", c.name, bad)
			}
		}
		if n := strings.Count(svg, `class="tick"`); n > 2*maxTicks {
			t.Errorf("%s: %d ticks", c.name, n)
		}
	}
}

// The same through the report's panels: metrics lines with ±1e308.
func TestPanelsExtremeMetrics(t *testing.T) {
	var lines []string
	for i, v := range []float64{-1e308, 1e308, 1e-308, 1e308} {
		lines = append(lines, fmt.Sprintf(`{"step":%d,"loss":%g,"lr":%g,"tokens_per_s":%g,"mfu":%g,"step_s":%g}`, i+1, v, v, v, v, math.Abs(v)))
	}
	steps, err := ReadMetrics(strings.NewReader(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	within(t, 10*time.Second, "panels", func() string {
		var b strings.Builder
		WriteHTML(&b, Page{Title: "t", Panels: Panels(&Run{Steps: steps})})
		return b.String()
	})
}

// Issue 29: a trace event whose ts+dur overflows made the timeline's range
// infinite (and the report hang): it is refused with the event named.
func TestParseTraceOverflow(t *testing.T) {
	for _, c := range []struct{ name, json string }{
		{"ts+dur overflows", `[{"name":"a","ph":"X","ts":1e308,"dur":1e308,"pid":0,"tid":0}]`},
		{"span overflows", `[{"name":"a","ph":"X","ts":-1e308,"dur":1,"pid":0,"tid":0},{"name":"b","ph":"X","ts":1e308,"dur":1,"pid":0,"tid":0}]`},
	} {
		tr, err := ParseTrace([]byte(c.json))
		if err == nil {
			within(t, 5*time.Second, c.name, func() string { return tr.TimelineSVG(800) })
			t.Errorf("%s: accepted", c.name)
			continue
		}
		if !strings.Contains(err.Error(), "trace:") {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

func TestReadMetricsBounds(t *testing.T) {
	long := strings.Repeat(" ", MaxMetricsLine+1)
	if _, err := ReadMetrics(strings.NewReader(long)); err == nil || !strings.Contains(err.Error(), "line 1: longer than") {
		t.Errorf("a line over the bound: %v", err)
	}
}
