package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"trellis/trace"
)

// trellis trace merge joins the per-rank files and prints each rank's idle
// fraction of its last step and pipeline span.
func TestTraceMerge(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Unix(10, 0)
	for r := 0; r < 2; r++ {
		tr := trace.New(r)
		tr.SpanTo(trace.Step, "step 1", t0, t0.Add(4*time.Millisecond))
		tr.SpanTo(trace.Step, "pipeline", t0, t0.Add(2*time.Millisecond))
		tr.SpanTo(trace.Compute, "F mb0 c0", t0, t0.Add(time.Millisecond))
		if err := trace.Write(trace.RankFile(dir, r), tr); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	c := newTraceCmd()
	c.SetOut(&out)
	c.SetArgs([]string{"merge", dir})
	if err := c.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"(2 rank files)", "rank 1  step 1  4.0 ms, compute 1.0 ms, idle 75.0%", "rank 0  pipeline  2.0 ms, compute 1.0 ms, idle 50.0%"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %q in:\n%s", want, out.String())
		}
	}
	c = newTraceCmd()
	c.SetArgs([]string{"merge", t.TempDir()})
	if err := c.Execute(); err == nil {
		t.Error("merging an empty directory succeeded")
	}
}
