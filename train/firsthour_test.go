package train

import (
	"context"
	"log/slog"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"trellis/trace"
)

// The first hour's fixes in package train (issue 28): each test failed
// before its fix.

// Under auto a global batch the micro-batch does not divide is named as
// the divisibility rule it breaks, not as a memory or shape problem.
func TestAutoGlobalBatchDivisibility(t *testing.T) {
	j := DefaultJob()
	j.Parallel.Plan, j.Train.GlobalBatch = Auto, 7
	_, err := j.ChoosePlan()
	if err == nil || !strings.Contains(err.Error(), "train.global_batch=7 is not a multiple of train.micro_batch=2") || strings.Contains(err.Error(), "memory") {
		t.Errorf("global_batch=7 under auto: %v", err)
	}
}

// The step log prints the learning rate to 4 significant digits, not 17.
func TestStepLogLR(t *testing.T) {
	j := tinyJob("dp=1")
	j.Train.Steps, j.Train.Warmup, j.Train.LR = 3, 3, 2.6850842073984193e-3
	var b strings.Builder
	if _, err := Run(context.Background(), Options{Job: j, Log: slog.New(slog.NewTextHandler(&b, nil))}); err != nil {
		t.Fatal(err)
	}
	lrs := regexp.MustCompile(` lr=([0-9.e+-]+)`).FindAllStringSubmatch(b.String(), -1)
	if len(lrs) == 0 {
		t.Fatalf("no lr in the log:\n%s", b.String())
	}
	for _, m := range lrs {
		if digits := strings.TrimLeft(strings.NewReplacer(".", "", "-", "").Replace(strings.Split(m[1], "e")[0]), "0"); len(digits) > 4 {
			t.Errorf("lr=%s: more than 4 significant digits", m[1])
		}
	}
}

// --trace on a resumed run keeps the earlier run's steps: the resumed
// steps are appended to the same timeline, not written over it.
func TestTraceResumeAppends(t *testing.T) {
	dir, ck := t.TempDir(), t.TempDir()
	j := tinyJob("dp=2")
	j.Train.Steps = 4
	j.Checkpoint.Dir = ck
	if _, err := Run(context.Background(), Options{Job: j, Until: 2, Trace: dir}); err != nil {
		t.Fatal(err)
	}
	first, err := trace.Read(filepath.Join(dir, "trace.json"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), Options{Job: j, Resume: ck, Trace: dir}); err != nil {
		t.Fatal(err)
	}
	both, err := trace.Read(filepath.Join(dir, "trace.json"))
	if err != nil {
		t.Fatal(err)
	}
	var end int64
	for _, e := range first {
		end = max(end, e.TS)
	}
	kept, later := 0, 0
	for _, e := range both {
		switch {
		case e.Ph == "M":
		case e.TS <= end:
			kept++
		default:
			later++
		}
	}
	if n := len(first); kept < n-20 || later == 0 {
		t.Errorf("after the resume the trace holds %d of the first run's %d events and %d later ones", kept, n, later)
	}
}
