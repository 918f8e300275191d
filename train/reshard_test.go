package train

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"trellis/checkpoint"
)

// reshardPlans covers dp (1, 2, 4), ZeRO 0-3, tp, pp with vpp, and their
// products.
var reshardPlans = []string{
	"dp=1", "dp=2,zero=2", "dp=4,zero=3", "tp=2", "dp=2,tp=2,zero=1",
	"pp=2,vpp=2,schedule=interleaved,dp=2,zero=1",
	"pp=2,dp=2,zero=3", "pp=2,tp=2,sp=on,schedule=zb-h1",
}

// reshardJob is tinyJob with 4 layers (room for pp=2 × vpp=2) and 7 steps,
// checkpointed every 2.
func reshardJob(plan string) Job {
	j := tinyJob(plan)
	j.Model.Layers, j.Train.Steps = 4, 7
	return j
}

// A run checkpointed at step 2 under each plan resumes under each of the
// others: the next 5 losses match the uninterrupted run under the new plan
// (which started from the same initial weights) within 1e-5 relative, and
// equal it bit for bit when the plan is the same.
func TestReshardMatrix(t *testing.T) {
	plans := reshardPlans
	if testing.Short() {
		plans = []string{"dp=1", "dp=2,zero=3", "tp=2", "pp=2"}
	}
	straight := map[string]result{}
	ckpt := map[string]string{}
	for _, p := range plans {
		j := reshardJob(p)
		dir := t.TempDir()
		j.Checkpoint = checkpoint.Config{Dir: dir, Every: 2}
		straight[p] = runJob(t, j, "", "", 0)
		ckpt[p] = filepath.Join(dir, checkpoint.StepName(2))
	}
	for _, from := range plans {
		for _, to := range plans {
			t.Run(from+"→"+to, func(t *testing.T) {
				t.Parallel()
				got := runJob(t, reshardJob(to), "", ckpt[from], 0)
				want := straight[to].losses[2:]
				if len(got.losses) != len(want) {
					t.Fatalf("%d steps after resuming, want %d", len(got.losses), len(want))
				}
				for s, w := range want {
					g := got.losses[s]
					if from == to && g != w {
						t.Errorf("same plan, step %d: loss %v, want %v bit for bit", s+3, g, w)
					}
					if math.Abs(g-w) > 1e-5*math.Abs(w) {
						t.Errorf("step %d: loss %.9g, uninterrupted %.9g", s+3, g, w)
					}
				}
			})
		}
	}
}

// A checkpoint the new plan cannot map to is refused in one line naming
// the file and the reason, and nothing is written: another model shape, a
// corrupt shard (found when a rank reads it), a truncated rank file.
func TestReshardBadCheckpoint(t *testing.T) {
	j := reshardJob("dp=2,zero=1")
	src := t.TempDir()
	j.Checkpoint = checkpoint.Config{Dir: src, Every: 2}
	j.Train.Steps = 2
	runJob(t, j, "", "", 0)
	step := filepath.Join(src, checkpoint.StepName(2))
	rank1 := filepath.Join(step, checkpoint.RankFileName(1, 2))
	for _, tc := range []struct {
		name  string
		edit  func(t *testing.T, b []byte) []byte // of rank 1's file
		model func(*Job)
		want  []string
	}{
		{"another model", nil, func(j *Job) { j.Model.Hidden = 64 }, []string{"model"}},
		{"corrupt shard", func(t *testing.T, b []byte) []byte {
			b = append([]byte{}, b...)
			b[len(b)-5] ^= 1
			return b
		}, nil, []string{rank1, "checksum mismatch"}},
		{"truncated file", func(t *testing.T, b []byte) []byte { return b[:len(b)-7] }, nil, []string{rank1, "truncated"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orig, err := os.ReadFile(rank1)
			if err != nil {
				t.Fatal(err)
			}
			defer os.WriteFile(rank1, orig, 0o644)
			if tc.edit != nil {
				if err := os.WriteFile(rank1, tc.edit(t, orig), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			other := reshardJob("tp=2")
			if tc.model != nil {
				tc.model(&other)
			}
			out := t.TempDir()
			other.Checkpoint = checkpoint.Config{Dir: out, Every: 1}
			_, err = Run(context.Background(), Options{Job: other, Resume: src})
			if err == nil || strings.Contains(err.Error(), "\n") {
				t.Fatalf("got %v, want one line", err)
			}
			t.Log(err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v: does not name %q", err, w)
				}
			}
			if steps, _ := checkpoint.Steps(out); len(steps) != 0 {
				t.Errorf("the refused run wrote steps %v", steps)
			}
			if steps, _ := checkpoint.Steps(src); len(steps) != 1 || steps[0] != 2 {
				t.Errorf("the source checkpoint now holds steps %v", steps)
			}
		})
	}
}

// An elastic world re-derives only the data-parallel degree, keeping the
// global batch; a world the plan cannot use is one line naming why.
func TestFitWorld(t *testing.T) {
	for _, c := range []struct {
		plan  string
		world int
		want  string // the new plan text, or an error's text
		note  string
	}{
		{"dp=4,zero=3", 3, "dp=3,zero=3", "dp 4→3; train.global_batch=12 kept, 4 micro-batches per step instead of 3"},
		{"zero=2,dp=4", 2, "zero=2,dp=2", "dp 4→2"},
		{"tp=2,zero=1", 4, "dp=2,tp=2,zero=1", "dp 1→2"},
		{"dp=4,zero=3", 4, "dp=4,zero=3", ""},
		{"dp=2,tp=2", 3, "cannot run on 3 workers: the world must be a multiple of tp×pp×cp = 2", ""},
		{"dp=4", 5, "train.global_batch=12 is not a multiple of dp=5 × train.micro_batch=1", ""},
	} {
		j := tinyJob(c.plan)
		j.Train.MicroBatch, j.Train.GlobalBatch = 1, 12
		note, err := j.FitWorld(c.world)
		switch {
		case err != nil:
			if !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("%s on %d: %v, want %q", c.plan, c.world, err, c.want)
			}
		case j.Parallel.Plan != c.want || !strings.Contains(note, c.note) || (c.note == "") != (note == ""):
			t.Errorf("%s on %d: plan %q, note %q; want %q, %q", c.plan, c.world, j.Parallel.Plan, note, c.want, c.note)
		}
	}
}

// A checkpoint resumes across precisions and the layouts they bring
// (ZeRO-1/2 in 16-bit keep only their fp32 master shards; tp and pp split
// the units): a run checkpointed at step 2 under each source plan resumes
// under each target plan, and the next 5 losses equal those of the
// single device resuming the same checkpoint in the target's precision —
// within 1e-5 relative in fp32, and within halfParLoss in 16-bit (the
// bound of a 16-bit tp or pp plan against one device: the fp32 reduction
// order can flip a 16-bit rounding, TestHalfPrecisionParallelPlans). The
// step-2 weights and moments ZeRO-1 wrote from its fp32 master shards
// equal those of dp=2 without ZeRO in the same precision bit for bit,
// without clipping (the two sum the gradient norm's squares in different
// orders, so with clipping on the float32 clip factors may differ by an
// ulp).
func TestReshardPrecision(t *testing.T) {
	if testing.Short() {
		t.Skip("short: the reshard matrix covers the fp32 plans")
	}
	sources := []string{"dp=2,zero=1,precision=bf16", "tp=2,precision=fp16", "dp=2,zero=3"}
	targets := []string{"dp=1", "precision=bf16", "dp=2,zero=2,precision=bf16", "pp=2,precision=bf16", "tp=2,precision=fp16"}
	precOf := func(plan string) string {
		for _, p := range []string{"bf16", "fp16"} {
			if strings.Contains(plan, "precision="+p) {
				return ",precision=" + p
			}
		}
		return ""
	}
	ckpt := map[string]string{}
	for _, p := range sources {
		j := reshardJob(p)
		j.Train.Steps = 2
		dir := t.TempDir()
		got := runJob(t, j, dir, "", 0)
		ckpt[p] = got.sum.Checkpoint
		if whole, ok := map[string]string{"dp=2,zero=1,precision=bf16": "dp=2,precision=bf16"}[p]; ok {
			one, same := reshardJob(whole), reshardJob(p)
			one.Train.Steps, same.Train.Steps = 2, 2
			one.Train.GradClip, same.Train.GradClip = 0, 0
			ref := runJob(t, one, t.TempDir(), "", 0)
			got := runJob(t, same, t.TempDir(), "", 0)
			for _, x := range []struct {
				name     string
				got, ref []float32
			}{{"weights", got.w, ref.w}, {"first moments", got.m, ref.m}, {"second moments", got.v, ref.v}} {
				if err := sameBits(x.got, x.ref); err != nil {
					t.Errorf("%s: step-2 %s against one device: %v", p, x.name, err)
				}
			}
		}
	}
	for _, from := range sources {
		for _, to := range targets {
			t.Run(from+"→"+to, func(t *testing.T) {
				got := runJob(t, reshardJob(to), "", ckpt[from], 0)
				ref := runJob(t, reshardJob("dp=1"+precOf(to)), "", ckpt[from], 0)
				bound := 1e-5
				if precOf(to) != "" {
					bound = halfParLoss
				}
				if len(got.losses) != 5 || len(ref.losses) != 5 {
					t.Fatalf("%d and %d steps after resuming, want 5", len(got.losses), len(ref.losses))
				}
				for s, w := range ref.losses {
					if g := got.losses[s]; math.Abs(g-w) > bound*math.Abs(w) {
						t.Errorf("step %d: loss %.9g, one device resuming the same checkpoint %.9g (bound %g)", s+3, g, w, bound)
					}
				}
			})
		}
	}
}
