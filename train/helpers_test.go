package train

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"trellis/checkpoint"
	"trellis/metrics"
	"trellis/model"
	"trellis/parallel/flat"
	"trellis/parallel/zero"
)

// tinyJob trains a tiny model on the embedded novel: fast enough to run
// every plan.
func tinyJob(plan string) Job {
	j := DefaultJob()
	j.Model = model.Config{Layers: 2, Hidden: 32, Heads: 2, SeqLen: 16, Vocab: 256}
	j.Parallel.Plan, j.Parallel.DeviceMemory, j.Parallel.BucketSize = plan, "", "16KiB"
	j.Train.MicroBatch, j.Train.GlobalBatch, j.Train.Steps, j.Train.Warmup = 2, 8, 5, 1
	j.Train.EvalEvery, j.Train.EvalBatches, j.Train.SampleEvery, j.Train.Threads = 0, 1, -1, 1
	j.Train.LR = 3e-3
	j.Data.CacheDir = "off"
	j.Checkpoint = checkpoint.Config{}
	return j
}

// result is what a run reported: per-step losses and the final state
// read back from its last checkpoint.
type result struct {
	sum     *Summary
	losses  []float64
	norms   []float64 // gradient norms before clipping, per step
	w, m, v []float32
	experts []*metrics.Experts // every step's routing (MoE models)
}

// runJob trains j (with a checkpoint under dir when dir != ""), resuming
// from resume when set, stopping after until steps when > 0.
func runJob(t *testing.T, j Job, dir, resume string, until int) result {
	t.Helper()
	return runJobBias(t, j, dir, resume, until, nil)
}

// runJobBias is runJob with the MoE blocks' expert biases starting at
// bias (Options.expertBias; nil: zeros); result.experts holds every
// step's routing.
func runJobBias(t *testing.T, j Job, dir, resume string, until int, bias map[int][]float32) result {
	t.Helper()
	if dir != "" {
		j.Checkpoint = checkpoint.Config{Dir: dir}
	}
	var metrics bytes.Buffer
	sum, err := Run(context.Background(), Options{Job: j, Resume: resume, Until: until, Metrics: &metrics, expertBias: bias})
	if err != nil {
		t.Fatalf("plan %s: %v", j.Parallel.Plan, err)
	}
	res := result{sum: sum}
	sc := bufio.NewScanner(&metrics)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m metricsLine
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		res.losses = append(res.losses, m.Loss)
		res.norms = append(res.norms, m.GradNorm)
		res.experts = append(res.experts, m.Experts)
	}
	if dir != "" {
		res.w, res.m, res.v = readState(t, j.Model, sum.Checkpoint)
	}
	return res
}

// readState reads a checkpoint's whole weights and Adam moments.
func readState(t *testing.T, cfg model.Config, dir string) (w, m, v []float32) {
	t.Helper()
	c, err := checkpoint.Open(filepath.Clean(dir))
	if err != nil {
		t.Fatal(err)
	}
	lay := cfg.Layout()
	out := [3][]float32{}
	for i, prefix := range []string{"", "optim.m.", "optim.v."} {
		out[i] = make([]float32, lay.Size)
		if err := flat.Read(c, flat.TensorsOf(lay), prefix, 0, out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out[0], out[1], out[2]
}

// relL2 is ‖a−b‖₂ / ‖b‖₂.
func relL2(a, b []float32) float64 {
	var d2, b2 float64
	for i := range b {
		d := float64(a[i]) - float64(b[i])
		d2 += d * d
		b2 += float64(b[i]) * float64(b[i])
	}
	return math.Sqrt(d2 / b2)
}

func sameBits(a, b []float32) error {
	if len(a) != len(b) {
		return fmt.Errorf("lengths %d and %d", len(a), len(b))
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return fmt.Errorf("element %d: %g vs %g", i, a[i], b[i])
		}
	}
	return nil
}

// commBound is the documented bound of the communication buffers of a
// job's plan on any rank.
func commBound(t *testing.T, j Job, stage, n int) int64 {
	t.Helper()
	if stage < 2 {
		return 0
	}
	s, err := j.resolve()
	if err != nil {
		t.Fatal(err)
	}
	var bound int64
	for r := 0; r < n; r++ {
		m, err := zero.Shape{Layout: j.Model.Layout(), Stage: stage, Ranks: n, Rank: r, BucketElems: int(s.bucket / 4), Overlap: j.Parallel.Overlap}.Memory()
		if err != nil {
			t.Fatal(err)
		}
		bound = max(bound, m.Comm)
	}
	return bound
}
