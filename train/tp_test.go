package train

import (
	"fmt"
	"strings"
	"testing"

	"trellis/model"
)

// tpJob is tinyJob with a model tensor parallelism of 2 and 4 can split:
// 4 heads of 9, 12 tokens, and a vocabulary of 257 that needs padding.
func tpJob(plan string, dropout float64) Job {
	j := tinyJob(plan)
	j.Model = model.Config{Layers: 2, Hidden: 36, Heads: 4, SeqLen: 12, Vocab: 257, Dropout: dropout}
	return j
}

// Tensor parallelism (tp ∈ {2, 4}, with and without sequence parallelism)
// and its composition with data parallelism and every ZeRO stage, with
// dropout off and on, train the single device's model: per-step losses and
// gradient norms within 1e-5 relative over 5 steps, final weights and Adam moments within
// 1e-5 in relative L2. (parallel/tp holds every gradient element of a
// step to the single device's.)
func TestTPPlansMatchSingleDevice(t *testing.T) {
	plans := []string{"tp=2", "tp=2,sp=on", "tp=4", "tp=4,sp=on",
		"dp=2,tp=2,zero=0", "dp=2,tp=2,sp=on,zero=1", "dp=2,tp=2,zero=2", "dp=2,tp=2,sp=on,zero=3"}
	for _, drop := range []float64{0, 0.1} {
		ref := runJob(t, tpJob("dp=1", drop), t.TempDir(), "", 0)
		for _, plan := range plans {
			t.Run(fmt.Sprintf("%s/dropout=%v", plan, drop), func(t *testing.T) {
				j := tpJob(plan, drop)
				j.Parallel.Overlap = strings.Contains(plan, "sp")
				got := runJob(t, j, t.TempDir(), "", 0)
				if s, _ := j.resolve(); len(got.sum.Ranks) != s.ranks || s.ranks < 2 {
					t.Errorf("%d ranks reported, want the plan's %d", len(got.sum.Ranks), s.ranks)
				}
				for _, r := range got.sum.Ranks {
					if cb := r.CommBytes; cb.TP == 0 || (cb.DP > 0) != strings.HasPrefix(plan, "dp=2") {
						t.Errorf("rank %d: comm_bytes %+v", r.Rank, cb)
					}
				}
				compareRuns(t, got, ref)
			})
		}
	}
}

// The same tensor-parallel plan twice is bit-identical, and a run split by
// --until and resumed from its checkpoint equals the straight run bit for
// bit; the checkpoint samples on one device.
func TestTPResumeBitIdentical(t *testing.T) {
	j := tpJob("dp=2,tp=2,sp=on,zero=1", 0.1)
	j.Train.Steps = 6
	a := runJob(t, j, t.TempDir(), "", 0)
	a2 := runJob(t, j, t.TempDir(), "", 0)
	dir := t.TempDir()
	b1 := runJob(t, j, dir, "", 3)
	b2 := runJob(t, j, dir, dir, 0)
	got := append(append([]float64{}, b1.losses...), b2.losses...)
	for s := range a.losses {
		if got[s] != a.losses[s] || a2.losses[s] != a.losses[s] {
			t.Errorf("step %d: loss %v (split), %v (again) vs %v (straight)", s+1, got[s], a2.losses[s], a.losses[s])
		}
	}
	for _, x := range []struct {
		what    string
		a, b, c []float32
	}{{"weights", a.w, b2.w, a2.w}, {"first moments", a.m, b2.m, a2.m}, {"second moments", a.v, b2.v, a2.v}} {
		if err := sameBits(x.b, x.a); err != nil {
			t.Errorf("%s, resumed: %v", x.what, err)
		}
		if err := sameBits(x.c, x.a); err != nil {
			t.Errorf("%s, again: %v", x.what, err)
		}
	}
	text, err := SampleCheckpoint(SampleOptions{Checkpoint: dir, Prompt: "It is", Tokens: 8, Seed: 1, Threads: 1})
	if err != nil || len(text) == 0 {
		t.Errorf("sampling the tensor-parallel checkpoint on one device: %q, %v", text, err)
	}
}

// Plans tensor parallelism cannot run are refused before anything starts,
// one line naming the numbers.
func TestTPErrors(t *testing.T) {
	for _, tc := range []struct {
		plan    string
		devices int
		model   func(*model.Config)
		want    string
	}{
		{"tp=3", 0, nil, "tp=3 does not divide model.heads=4"},
		{"tp=8", 0, func(c *model.Config) { c.Heads = 8; c.Hidden = 40; c.SeqLen = 12 }, "tp=8 does not divide model.seq_len"},
		{"tp=2,sp=on", 0, func(c *model.Config) { c.SeqLen = 13 }, "tp=2 does not divide model.seq_len=13"},
		{"tp=1,sp=on", 0, nil, "sp=on needs tp>1"},
		{"tp=4", 2, nil, "tp=4 is larger than parallel.devices=2"},
	} {
		j := tpJob(tc.plan, 0)
		if tc.plan == "tp=8" {
			j.Parallel.Plan = "tp=8,sp=on"
		}
		j.Parallel.Devices = tc.devices
		if tc.model != nil {
			tc.model(&j.Model)
		}
		err := j.Check()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.plan, err, tc.want)
		}
	}
}
