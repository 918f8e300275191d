package train

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"trellis/launch"
	"trellis/trace"
)

// A pipeline run as processes over comm/tcp gives the same losses as its
// goroutine ranks over comm/local, bit for bit (point-to-point moves exact
// bytes; the only reductions are sums of two values). Each process writes
// its own trace file; trace.Merge joins them, one track per rank.
func TestTCPPipelineMatchesLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts worker processes")
	}
	for _, tc := range []struct {
		plan  string
		procs int
	}{{"pp=2,schedule=1f1b", 2}, {"pp=2,dp=2,zero=1", 4}, {"pp=2,tp=2,sp=on", 4}} {
		t.Run(tc.plan, func(t *testing.T) { tcpPipeline(t, tc.plan, tc.procs) })
	}
}

func tcpPipeline(t *testing.T, plan string, procs int) { tcpJob(t, ppJob(plan, 3), procs) }

// Expert parallelism as processes over comm/tcp (the dispatch's and the
// combine's all-to-alls point to point) equals its goroutine ranks bit for
// bit.
func TestTCPExpertParallelMatchesLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts worker processes")
	}
	tcpJob(t, moeJob("pp=2,dp=2,ep=2,zero=1", 3, 0.75), 4)
}

// tcpJob runs j over comm/local and as procs processes over comm/tcp and
// compares their losses bit for bit and their traces.
func tcpJob(t *testing.T, j Job, procs int) {
	want := runJob(t, j, "", "", 0).losses
	j.Parallel.Backend = "tcp"
	js, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	metrics, traces := filepath.Join(dir, "metrics.jsonl"), filepath.Join(dir, "trace")
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = launch.Run(ctx, launch.Config{
		NProcPerNode: procs, Program: os.Args[0], Args: []string{"-test.run=^$"},
		Env:    []string{envWorker + "=1", envJob + "=" + string(js), envMetrics + "=" + metrics, envTrace + "=" + traces},
		Stdout: &out, Stderr: &out,
	})
	if err != nil {
		t.Fatalf("launch: %v\n%s", err, out.String())
	}
	got := readLosses(t, metrics)
	if len(got) != len(want) {
		t.Fatalf("%d steps over tcp, %d over local\n%s", len(got), len(want), out.String())
	}
	for s := range want {
		if got[s] != want[s] {
			t.Errorf("step %d: loss %.9g over tcp, %.9g over local", s+1, got[s], want[s])
		}
	}
	path, n, err := trace.Merge(traces)
	if err != nil || n != procs {
		t.Fatalf("merge: %d files, %v", n, err)
	}
	evs, err := trace.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	idle := trace.Idle(evs, "pipeline")
	if len(idle) != procs {
		t.Fatalf("merged trace has steps of %d ranks, want %d", len(idle), procs)
	}
	set, err := j.resolve()
	if err != nil {
		t.Fatal(err)
	}
	m := set.accum
	for _, ri := range idle {
		if ri.Compute != 2*m || ri.Idle <= 0 || ri.Idle >= 1 {
			t.Errorf("rank %d: %d compute spans in the last step (want F and B of %d micro-batches), idle %.3f", ri.Rank, ri.Compute, m, ri.Idle)
		}
	}
}
