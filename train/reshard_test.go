package train

import (
	"bytes"
	"context"
	"math"
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

// A checkpoint of another model shape is refused in one line naming the
// index file or the field, and nothing is written.
func TestReshardRefusesAnotherModel(t *testing.T) {
	j := reshardJob("dp=2,zero=1")
	dir := t.TempDir()
	j.Checkpoint = checkpoint.Config{Dir: dir, Every: 2}
	j.Train.Steps = 2
	runJob(t, j, "", "", 0)
	other := reshardJob("tp=2")
	other.Model.Hidden = 64
	out := t.TempDir()
	other.Checkpoint = checkpoint.Config{Dir: out}
	var log bytes.Buffer
	_, err := Run(context.Background(), Options{Job: other, Resume: dir, Metrics: &log})
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "model") {
		t.Fatalf("another model: %v, want one line naming the model", err)
	}
	if steps, _ := checkpoint.Steps(out); len(steps) != 0 {
		t.Errorf("the refused run wrote steps %v", steps)
	}
}
