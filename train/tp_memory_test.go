package train

import (
	"os"
	"testing"

	"trellis/device"
	"trellis/plan"
)

// actFormula is the per-rank act peak docs/ARCHITECTURE.md states for a
// tensor-parallel degree t (1: none), in bytes: one micro-batch's stash,
// with s = T, b = B, h = C, a = NH, n = bs (bs/t with SP), V' = ⌈V/t⌉,
//
//	per layer  4·(4nh + 4n + 12bsh/t + a·b·s²/t)   (res, ln1, res2, ln2; LN stats; qkv, atty, fc, fcg; scores)
//	+ 4·(nh + nh + 2n + bs·V' + bs)                 (the last residual, ln_f and its stats, probabilities, losses)
//	+ 16·bs                                         (the stash's and the rank's input and target ids, int32)
func actFormula(j Job, t int, sp bool) int64 {
	c := j.Model
	s, b, h, a, L := int64(c.SeqLen), int64(j.Train.MicroBatch), int64(c.Hidden), int64(c.Heads), int64(c.Layers)
	T := int64(t)
	bs := b * s
	n := bs
	if sp {
		n = bs / T
	}
	vl := (int64(c.Vocab) + T - 1) / T
	layer := 4*n*h + 4*n + 12*bs*h/T + a*b*s*s/T
	return 4*(L*layer+2*n*h+2*n+bs*vl+bs) + 16*bs
}

// plannedAct is the planner's act prediction for j on the CPU host
// cluster file (engine_stash = true: the engine's formula).
func plannedAct(t *testing.T, j Job) int64 {
	t.Helper()
	pj, p := plannerJob(t, j)
	return pj.Memory(p).Act
}

// plannedMemory is plannedAct's whole prediction.
func plannedMemory(t *testing.T, j Job) plan.Memory {
	t.Helper()
	pj, p := plannerJob(t, j)
	return pj.Memory(p)
}

// plannerJob is j as the planner sees it on the CPU host cluster file,
// and its engine plan.
func plannerJob(t *testing.T, j Job) (plan.Job, plan.Plan) {
	t.Helper()
	data, err := os.ReadFile("../plan/testdata/cpu-host.toml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := plan.ParseClusterFile(data)
	if err != nil {
		t.Fatal(err)
	}
	s, err := j.resolve()
	if err != nil {
		t.Fatal(err)
	}
	m := j.Model
	pj := plan.Job{Model: plan.Model{Name: "tiny", Family: plan.GPT, Layers: m.Layers, Hidden: m.Hidden, Heads: m.Heads,
		KVHeads: m.Heads, FFN: 4 * m.Hidden, Vocab: m.Vocab, MaxSeq: m.SeqLen, Tied: true, AttnBias: true, MLPBias: true,
		Dropout: m.Dropout > 0}, Cluster: c, Devices: s.ranks, Seq: m.SeqLen, GlobalBatch: j.Train.GlobalBatch}
	if err := pj.Check(s.enginePlan); err != nil {
		t.Fatal(err)
	}
	return pj, s.enginePlan
}

// The act peak every rank reports equals the formula exactly, and so does
// the planner's prediction for a CPU host cluster file: with tp=t the
// attention and MLP interiors shrink by t and the LayerNorm, dropout and
// residual regions do not; with sp they shrink too.
func TestTPActivationMemory(t *testing.T) {
	for _, tc := range []struct {
		plan string
		t    int
		sp   bool
	}{{"dp=1", 1, false}, {"tp=2", 2, false}, {"tp=2,sp=on", 2, true}, {"tp=4", 4, false}, {"dp=2,tp=4,sp=on,zero=1", 4, true}} {
		j := tpJob(tc.plan, 0.1)
		j.Train.Steps = 1
		got := runJob(t, j, "", "", 0)
		want := actFormula(j, tc.t, tc.sp)
		if p := plannedAct(t, j); p != want {
			t.Errorf("%s: the planner predicts act %d bytes, the formula %d", tc.plan, p, want)
		}
		for _, r := range got.sum.Ranks {
			if a := r.Peak[device.Act]; a != want {
				t.Errorf("%s rank %d: act peak %d bytes, formula %d", tc.plan, r.Rank, a, want)
			}
		}
	}
}
