package dashboard

import (
	"testing"
)

// BenchmarkStep is what the training loop pays per step for the dashboard:
// one append under the lock and a wake-up of each of 8 browsers.
func BenchmarkStep(b *testing.B) {
	h := New(Config{})
	for range 8 {
		_, cancel, _ := h.subscribe()
		defer cancel()
	}
	l := line(1)
	b.ResetTimer()
	for b.Loop() {
		h.Step(l)
	}
}

// BenchmarkRender is one whole frame (every panel, as a new browser gets
// it) of a 1000-step history, rendered on a browser's goroutine at most
// once per change.
func BenchmarkRender(b *testing.B) {
	h := New(Config{})
	for i := 1; i <= 1000; i++ {
		h.Step(line(i))
	}
	h.render()
	b.ResetTimer()
	for b.Loop() {
		h.Step(line(1001))
		f := h.render()
		b.ReportMetric(float64(len(f.diff(noVersion))), "bytes/frame")
	}
}

// BenchmarkFrame is what a step costs the dashboard with one browser
// following a 1000-step run: the render of the new version and the frame
// the browser is sent (the panels that changed since its last).
func BenchmarkFrame(b *testing.B) {
	h := New(Config{})
	for i := 1; i <= 1000; i++ {
		h.Step(line(i))
	}
	f := h.render()
	n := 1000
	b.ResetTimer()
	for b.Loop() {
		n++
		h.Step(line(n))
		g := h.render()
		b.ReportMetric(float64(len(g.diff(f.version))), "bytes/frame")
		f = g
	}
}
