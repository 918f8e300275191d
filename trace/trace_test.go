package trace

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A nil tracer records nothing and reads no clock.
func TestNilTracer(t *testing.T) {
	var tr *Tracer
	if !tr.Now().IsZero() {
		t.Fatal("nil tracer read the clock")
	}
	tr.Span(Compute, "F", time.Now())
	if tr.Events() != nil {
		t.Fatal("nil tracer has events")
	}
	if n := testing.AllocsPerRun(100, func() { tr.Span(Compute, "F", tr.Now(), "mb", 1) }); n > 1 {
		t.Fatalf("%v allocations per span with tracing off", n)
	}
}

// Per-rank files merge into one trace whose idle fractions are the spans'.
func TestMergeAndIdle(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Unix(100, 0)
	for r := 0; r < 2; r++ {
		tr := New(r)
		tr.SpanTo(Step, "pipeline", t0, t0.Add(100*time.Microsecond))
		// rank r computes 60 µs, of which 10 lie outside the step
		tr.SpanTo(Compute, "F mb0 c0", t0.Add(-10*time.Microsecond), t0.Add(20*time.Microsecond))
		tr.SpanTo(Compute, "B mb0 c0", t0.Add(time.Duration(50+10*r)*time.Microsecond), t0.Add(time.Duration(80+10*r)*time.Microsecond))
		if err := Write(RankFile(dir, r), tr); err != nil {
			t.Fatal(err)
		}
	}
	path, n, err := Merge(dir)
	if err != nil || n != 2 || path != filepath.Join(dir, "trace.json") {
		t.Fatalf("merge: %s, %d files, %v", path, n, err)
	}
	evs, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	idle := Idle(evs, "pipeline")
	if len(idle) != 2 {
		t.Fatalf("%d ranks, want 2", len(idle))
	}
	for _, ri := range idle {
		if ri.Busy != 50 || ri.Span != 100 || ri.Idle != 0.5 || ri.Compute != 2 {
			t.Errorf("rank %d: %+v, want 50 of 100 µs busy", ri.Rank, ri)
		}
	}
	if _, _, err := Merge(t.TempDir()); err == nil {
		t.Fatal("merging an empty directory succeeded")
	}
	if err := os.WriteFile(filepath.Join(dir, "trace.rank9.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Merge(dir); err == nil {
		t.Fatal("a corrupt file merged")
	}
}
