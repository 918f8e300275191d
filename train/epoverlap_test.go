package train

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"trellis/config"
	"trellis/launch"
	"trellis/plan"
)

// epOverlapJob is moeJob with four micro-batches a rank (three pairs
// F(k+1) beside B(k) under ep_overlap=on).
func epOverlapJob(p string, capacity float64) Job {
	j := moeJob(p, 3, capacity)
	j.Train.GlobalBatch = 16
	return j
}

// ep_overlap=on trains the plain run's model bit for bit: the same
// per-step losses and gradient norms, the same routing, and the same
// final weights and Adam moments, in fp32, bf16 and fp16 (its loss
// scale), with capacity drops
// and dropless, with ZeRO-1/2 over edp replicas, full recomputation and
// DeepSeek-V3's expert biases (the paired forward accumulates nothing;
// the backwards keep their order; the two runners count into one set of
// routing statistics in the forwards' order).
func TestEPOverlapBitIdentical(t *testing.T) {
	for _, tc := range []struct {
		plan     string
		capacity float64
		bias     bool // router_expert_bias: the pair routes by the one set of biases
	}{
		{"dp=2,ep=2", 0.75, false}, {"dp=2,ep=2", 0, false},
		{"dp=2,ep=2,precision=bf16", 0.75, false}, {"dp=2,ep=2,precision=bf16", 0, false},
		{"dp=4,ep=2,zero=2", 0.75, false}, {"dp=2,ep=2,zero=1,recompute=full", 0, false},
		{"dp=2,ep=2", 0, true}, {"dp=2,ep=2,precision=fp16", 0.75, false},
	} {
		t.Run(fmt.Sprintf("%s/capacity=%g/bias=%v", tc.plan, tc.capacity, tc.bias), func(t *testing.T) {
			job := func(p string) Job {
				j := epOverlapJob(p, tc.capacity)
				j.Model.RouterExpertBias = tc.bias
				return j
			}
			ref := runJob(t, job(tc.plan), t.TempDir(), "", 0)
			got := runJob(t, job(tc.plan+",ep_overlap=on"), t.TempDir(), "", 0)
			if !strings.Contains(got.sum.Plan, "ep_overlap=on") {
				t.Fatalf("the run's plan %s", got.sum.Plan)
			}
			if !reflect.DeepEqual(got.losses, ref.losses) || !reflect.DeepEqual(got.norms, ref.norms) {
				t.Fatalf("losses %v norms %v, plain run %v %v", got.losses, got.norms, ref.losses, ref.norms)
			}
			for _, x := range []struct {
				what string
				a, b []float32
			}{{"weights", got.w, ref.w}, {"m", got.m, ref.m}, {"v", got.v, ref.v}} {
				if err := sameBits(x.a, x.b); err != nil || len(x.a) == 0 {
					t.Fatalf("%s (%d values): not the plain run's bit for bit: %v", x.what, len(x.a), err)
				}
			}
			for s := range ref.experts {
				r, g := ref.experts[s], got.experts[s]
				if !reflect.DeepEqual(r, g) {
					t.Errorf("step %d: routing %+v, plain run %+v", s+1, g, r)
				}
			}
		})
	}
}

// Under ep_overlap=on every rank's peak per tag stays within 5% of the
// planner's (the second runner's workspace, the second stash and head,
// the paired forward's MoE unit are predicted).
func TestEPOverlapMemoryPredicted(t *testing.T) {
	for _, p := range []string{"dp=2,ep=2,ep_overlap=on", "dp=2,ep=2,precision=bf16,ep_overlap=on", "dp=4,ep=2,zero=2,ep_overlap=on"} {
		t.Run(p, func(t *testing.T) {
			holdPredicted(t, epOverlapJob(p, 0.75))
		})
	}
}

// Under ep_overlap=on the step split still adds up: ep_wait_s is the
// exposed part of the two ep groups' waits (the token's idle time), a
// part of comm, and not more than the streams' waits together.
func TestEPOverlapSplitAddsUp(t *testing.T) {
	j := epOverlapJob("dp=2,ep=2,ep_overlap=on", 0.75)
	j.Parallel.LinkBandwidth, j.Parallel.LinkLatency = "20MB", "100us"
	j.Train.Steps = 3
	for _, r := range runJob(t, j, "", "", 0).sum.Ranks {
		parts := r.Compute + r.CommWait + r.Bubble + r.Misc
		if d := math.Abs((parts - r.Steps).Seconds()); r.Steps <= 0 || d > 1e-6*r.Steps.Seconds() {
			t.Errorf("rank %d: compute %v + comm %v + bubble %v + misc %v = %v, its steps took %v", r.Rank, r.Compute, r.CommWait, r.Bubble, r.Misc, parts, r.Steps)
		}
		if r.EPWait <= 0 || r.EPWait > r.CommWait || r.Compute <= 0 || r.CommWait > r.CommBusy {
			t.Errorf("rank %d: ep wait %v, comm %v (busy %v), compute %v", r.Rank, r.EPWait, r.CommWait, r.CommBusy, r.Compute)
		}
	}
}

// Evaluation and the end-of-run sample run on the backward's runner
// outside the step's pairs (the token free: its ep group alone), and
// sample the plain run's text.
func TestEPOverlapSample(t *testing.T) {
	sample := func(p string) string {
		j := epOverlapJob(p, 0.75)
		j.Train.Steps, j.Train.SampleEvery, j.Train.EvalEvery = 2, 0, 1
		var out bytes.Buffer
		if _, err := Run(context.Background(), Options{Job: j, Out: &out}); err != nil {
			t.Fatalf("plan %s: %v", p, err)
		}
		_, after, ok := strings.Cut(out.String(), "--- sample at step")
		if !ok {
			t.Fatalf("no sample in the output:\n%s", out.String())
		}
		body, _, _ := strings.Cut(after, "\n---\n")
		return body
	}
	if plain, ov := sample("dp=2,ep=2"), sample("dp=2,ep=2,ep_overlap=on"); plain != ov {
		t.Errorf("ep_overlap=on sampled %q, the plain run %q", ov, plain)
	}
}

// ep_overlap=on is refused by name where the pair could issue a
// collective in a timing-dependent order, has nothing to hide (no ep) or
// nothing to pair (one micro-batch a step).
func TestEPOverlapRefused(t *testing.T) {
	for _, tc := range []struct{ plan, want string }{
		{"dp=2,ep_overlap=on", "needs ep > 1"},
		{"dp=2,ep=2,pp=2,ep_overlap=on", "pp=2"},
		{"dp=2,ep=2,zero=3,ep_overlap=on", "zero=3"},
		{"dp=2,ep=2,tp=2,sp=on,etp=2,ep_overlap=on", "tp=2"},
		{"dp=2,ep=2,ep_overlap=on", "nothing to pair"}, // one micro-batch a step
	} {
		p, err := plan.Parse(tc.plan)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(p.String(), "ep_overlap=on") {
			t.Errorf("%s: String() = %s", tc.plan, p)
		}
		if q, err := plan.Parse(p.String()); err != nil || q != p {
			t.Errorf("%s: Parse(String()) = %v, %v", tc.plan, q, err)
		}
		j := epOverlapJob(tc.plan, 0.75)
		if tc.want == "nothing to pair" {
			j.Train.GlobalBatch = 4
		}
		if _, err := j.resolve(); err == nil || !strings.Contains(err.Error(), "ep_overlap=on") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a refusal naming ep_overlap=on and %q", tc.plan, err, tc.want)
		}
	}
}

// On examples/ep-slow-links.toml's emulated link (1 MB/s, 100 µs; the
// rank's messages to its peer share one link whatever the group) with
// four micro-batches a step, ep_overlap=on against the plain run, side by
// side, runs alternating: the medians of the exposed ep wait (ep_wait_s)
// and the step time. docs/BENCHMARKS.md ("Expert parallelism: the
// overlapped 1F1B") has the numbers. A timing: only with TRELLIS_TIMING=1.
func TestEPOverlapSlowLinks(t *testing.T) {
	if os.Getenv("TRELLIS_TIMING") != "1" {
		t.Skip("a timing: set TRELLIS_TIMING=1 to measure ep_overlap=on against the plain run on an emulated link")
	}
	const runs = 3
	for _, tc := range []struct {
		name string
		set  []string
	}{
		{"dp=2,ep=2", nil},
		{"dp=2,ep=2,precision=bf16", []string{"parallel.plan=dp=2,ep=2,precision=bf16"}},
		{"dp=2,ep=2,link=4MB/s", []string{"parallel.link_bandwidth=4MB"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := func(overlap bool) Job {
				j := DefaultJob()
				if err := config.Load(&j, "../examples/ep-slow-links.toml", append([]string{"train.global_batch=16", "train.steps=6"}, tc.set...)); err != nil {
					t.Fatal(err)
				}
				if overlap {
					j.Parallel.Plan += ",ep_overlap=on"
				}
				return j
			}
			var ep, step [2][]float64 // [plain, overlap]
			var pred [2]float64       // the planner's exposed ep time a step
			for range runs {
				for i, ov := range []bool{false, true} {
					sum := runJob(t, job(ov), "", "", 0).sum
					ep[i], step[i] = append(ep[i], sum.EPSeconds), append(step[i], sum.StepSeconds)
					if sum.Prediction == nil || sum.Prediction.Err != nil {
						t.Fatalf("no step-time prediction: %+v", sum.Prediction)
					}
					pred[i] = sum.Prediction.Time.EP
				}
			}
			med := func(x []float64) float64 { y := slices.Clone(x); slices.Sort(y); return y[len(y)/2] }
			ep0, ep1, st0, st1 := med(ep[0]), med(ep[1]), med(step[0]), med(step[1])
			t.Logf("plain:   ep_wait %.4f s/step %v, step %.4f s %v", ep0, ep[0], st0, step[0])
			t.Logf("overlap: ep_wait %.4f s/step %v, step %.4f s %v", ep1, ep[1], st1, step[1])
			t.Logf("overlap/plain: exposed ep wait %.2f×, step %.2f×", ep1/ep0, st1/st0)
			t.Logf("predicted exposed ep: plain %.4f s (%+.1f%%), overlap %.4f s (%+.1f%%)", pred[0], 100*(pred[0]/ep0-1), pred[1], 100*(pred[1]/ep1-1))
			if ep1 >= ep0 || st1 >= st0 {
				t.Errorf("ep_overlap=on: exposed ep wait %.4f s and step %.4f s, plain %.4f s and %.4f s: nothing hidden", ep1, st1, ep0, st0)
			}
		})
	}
}

// ep_overlap=on as processes over comm/tcp (the two ep groups' messages
// point to point, the pair pinned to its OS threads) gives the goroutine
// ranks' losses bit for bit.
func TestTCPEPOverlapMatchesLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts worker processes")
	}
	j := epOverlapJob("dp=2,ep=2,ep_overlap=on", 0.75)
	want := runJob(t, j, "", "", 0).losses
	j.Parallel.Backend = "tcp"
	js, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	metrics := filepath.Join(t.TempDir(), "metrics.jsonl")
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := launch.Run(ctx, launch.Config{
		NProcPerNode: 2, Program: os.Args[0], Args: []string{"-test.run=^$"},
		Env:    []string{envWorker + "=1", envJob + "=" + string(js), envMetrics + "=" + metrics},
		Stdout: &out, Stderr: &out,
	}); err != nil {
		t.Fatalf("launch: %v\n%s", err, out.String())
	}
	if got := readLosses(t, metrics); !reflect.DeepEqual(got, want) {
		t.Errorf("losses over tcp %v, over local %v\n%s", got, want, out.String())
	}
}
