package dashboard

import (
	"testing"
)

// BenchmarkStep is what the training loop pays per step for the dashboard:
// one append under the lock and a wake-up of each of 8 browsers.
func BenchmarkStep(b *testing.B) {
	h := New(Config{})
	for range 8 {
		_, cancel := h.subscribe()
		defer cancel()
	}
	l := line(1)
	b.ResetTimer()
	for b.Loop() {
		h.Step(l)
	}
}

// BenchmarkRender is one frame (every panel) of a 1000-step history, done
// on a browser's goroutine at most once per change.
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
