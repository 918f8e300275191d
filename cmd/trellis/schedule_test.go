package main

import (
	"strings"
	"testing"

	"trellis/plan"
)

// --explain prints the engine's schedule for a pipeline, and nothing
// without one.
func TestScheduleText(t *testing.T) {
	p, err := plan.Parse("pp=2,schedule=1f1b")
	if err != nil {
		t.Fatal(err)
	}
	got := scheduleText(p, 4)
	for _, want := range []string{"1f1b, pp=2, vpp=1, 4 micro-batches", "bubble at F = B = W: 20.0%", "[2 1]",
		"rank 0: F0.0 F1.0 B0.0 F2.0 B1.0 F3.0 B2.0 B3.0", "rank 1: F0.0 B0.0 F1.0"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	// zb-h1's W's are movable, as the engine runs them.
	p, _ = plan.Parse("pp=2,schedule=zb-h1")
	got = scheduleText(p, 4)
	for _, want := range []string{"rank 1: F0.0 B0.0 F1.0 B1.0 W0.0* F2.0", "* may run earlier, in this order, where the rank waits on a receive longer than a W"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	if p, _ = plan.Parse("dp=2"); scheduleText(p, 4) != "" {
		t.Error("a plan without a pipeline printed a schedule")
	}
	// dualpipev is the engine's list too: its V over two chunks per rank.
	p, _ = plan.Parse("pp=2,schedule=dualpipev")
	got = scheduleText(p, 4)
	for _, want := range []string{"dualpipev, pp=2, vpp=2, 4 micro-batches", "bubble at F = B = W: 4.0%", "[5 5]",
		"rank 0: F0.0 F1.0 F2.0 F0.1 B0.1 W0.1 F1.1 F3.0 B1.1 W1.1"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	if got := scheduleText(p, 3); !strings.Contains(got, "needs micro-batches >= 2·pp = 4") {
		t.Errorf("dualpipev with 3 micro-batches: %q", got)
	}
	p, _ = plan.Parse("pp=4,vpp=2,schedule=interleaved")
	if got := scheduleText(p, 6); !strings.Contains(got, "multiple of pp=4") {
		t.Errorf("bad interleaved shape: %q", got)
	}
}
