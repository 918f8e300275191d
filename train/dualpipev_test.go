package train

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// dualPipeVJob is the job of one DualPipeV case: GPT-2 (tied head) or a
// tiny Llama (untied head), dropout on, with 1-sequence micro-batches at
// pp = 4 so that the 8 sequences of a step make m = 8 = 2pp micro-batches
// (at pp = 2 m = 4): the least DualPipeV runs.
func dualPipeVJob(arch, parallel string, layers int) Job {
	j := ppJob(parallel, layers)
	if arch == "llama" {
		j = llamaJob(parallel, layers)
	}
	if strings.Contains(parallel, "pp=4") {
		j.Train.MicroBatch = 1
	}
	return j
}

// worstDiff is the largest relative difference of got's per-step losses
// and gradient norms from ref's, and of its final weights and moments in
// relative L2.
func worstDiff(got, ref result) (loss, state float64) {
	for s := range ref.losses {
		loss = max(loss, math.Abs(got.losses[s]-ref.losses[s])/ref.losses[s], math.Abs(got.norms[s]-ref.norms[s])/ref.norms[s])
	}
	for _, x := range [][2][]float32{{got.w, ref.w}, {got.m, ref.m}, {got.v, ref.v}} {
		state = max(state, relL2(x[0], x[1]))
	}
	return loss, state
}

// DualPipeV trains the single device's model at pp = 2 and pp = 4 (2 and
// 4 ranks, 4 and 8 chunks, uneven splits), with dropout, GPT-2's tied head
// (both its uses on rank 0, no tied group) and Llama's untied one, with
// selective and full recomputation, with ZeRO-1, 2 and 3 over dp = 2 and
// under tp = 2 ± sp: per-step
// losses and gradient norms within 1e-5 relative over 5 steps, the final
// weights and Adam moments within 1e-5 relative L2 (compareRuns); in bf16
// within the 16-bit plans' bound of the single device's bf16 run
// (halfParLoss, halfParState).
func TestDualPipeVMatchesSingleDevice(t *testing.T) {
	refs := map[string]result{}
	for _, tc := range []struct {
		arch, plan string
		layers     int
	}{
		{"gpt2", "pp=2,schedule=dualpipev", 5},
		{"gpt2", "pp=4,schedule=dualpipev", 9},
		{"gpt2", "pp=2,schedule=dualpipev,recompute=selective", 5},
		{"gpt2", "pp=2,schedule=dualpipev,recompute=full", 5},
		{"gpt2", "pp=2,dp=2,zero=1,schedule=dualpipev", 5},
		{"gpt2", "pp=2,dp=2,zero=2,schedule=dualpipev", 5},
		{"gpt2", "pp=2,dp=2,zero=3,schedule=dualpipev", 5},
		{"gpt2", "pp=2,tp=2,schedule=dualpipev", 4},
		{"gpt2", "pp=2,tp=2,sp=on,schedule=dualpipev", 4},
		{"llama", "pp=2,schedule=dualpipev", 5},
		{"llama", "pp=4,schedule=dualpipev", 8},
		{"llama", "pp=2,schedule=dualpipev,recompute=full", 4},
		{"gpt2", "pp=2,schedule=dualpipev,precision=bf16", 5},
		{"llama", "pp=2,schedule=dualpipev,precision=bf16", 4},
	} {
		t.Run(fmt.Sprintf("%s/%s/L%d", tc.arch, tc.plan, tc.layers), func(t *testing.T) {
			j := dualPipeVJob(tc.arch, tc.plan, tc.layers)
			if strings.Contains(tc.plan, "dp=2") {
				j.Train.GlobalBatch = 16 // 4 micro-batches per replica
			}
			half := strings.Contains(tc.plan, "bf16")
			refPlan := "dp=1"
			if half {
				refPlan += ",precision=bf16"
			}
			key := fmt.Sprint(tc.arch, refPlan, tc.layers, j.Train.MicroBatch, j.Train.GlobalBatch)
			ref, ok := refs[key]
			if !ok {
				rj := dualPipeVJob(tc.arch, refPlan, tc.layers)
				rj.Train.MicroBatch, rj.Train.GlobalBatch = j.Train.MicroBatch, j.Train.GlobalBatch
				ref = runJob(t, rj, t.TempDir(), "", 0)
				refs[key] = ref
			}
			got := runJob(t, j, t.TempDir(), "", 0)
			s, err := j.resolve()
			if err != nil || len(got.sum.Ranks) != s.ranks || s.enginePlan.Schedule != "dualpipev" {
				t.Fatalf("%d ranks reported (%v), want the plan's %d running dualpipev", len(got.sum.Ranks), err, s.ranks)
			}
			l, st := worstDiff(got, ref)
			t.Logf("worst relative difference: losses and norms %.3g, weights and moments (L2) %.3g", l, st)
			if half {
				bl, bs := halfParLoss, halfParState
				if tc.arch == "llama" {
					bl, bs = llamaHalfNorm, llamaHalfState
				}
				closeTo(t, got, ref, bl, bs)
				return
			}
			compareRuns(t, got, ref)
		})
	}
}

// Fewer than 2pp micro-batches are refused by name, with the rule.
func TestDualPipeVRefusesFewMicroBatches(t *testing.T) {
	j := ppJob("pp=2,schedule=dualpipev", 5)
	j.Train.MicroBatch = 4 // 8/4 = 2 micro-batches < 2pp = 4
	_, err := Run(t.Context(), Options{Job: j})
	if err == nil || !strings.Contains(err.Error(), "dualpipev") || !strings.Contains(err.Error(), "2·pp") {
		t.Fatalf("error %v, want the dualpipev rule of 2·pp micro-batches", err)
	}
	t.Log(err)
}

// Each rank's memory under DualPipeV is the planner's prediction, every
// tag within 5% (holdPredicted's rules), for GPT-2 (rank 0 holds the tied
// unit 0 once) and Llama (rank 0 holds the embedding and the untied head),
// in fp32 and bf16, at pp = 2 and 4.
func TestDualPipeVMemoryPredicted(t *testing.T) {
	for _, tc := range []struct {
		arch, plan string
		layers     int
	}{
		{"gpt2", "pp=2,schedule=dualpipev", 5},
		{"gpt2", "pp=4,schedule=dualpipev", 9},
		{"gpt2", "pp=2,schedule=dualpipev,precision=bf16", 4},
		{"gpt2", "pp=2,dp=2,zero=1,schedule=dualpipev", 4},
		{"llama", "pp=2,schedule=dualpipev", 5},
		{"llama", "pp=4,schedule=dualpipev,recompute=full", 8},
	} {
		t.Run(fmt.Sprintf("%s/%s/L%d", tc.arch, tc.plan, tc.layers), func(t *testing.T) {
			j := dualPipeVJob(tc.arch, tc.plan, tc.layers)
			if strings.Contains(tc.plan, "dp=2") {
				j.Train.GlobalBatch = 16
			}
			holdPredicted(t, j)
		})
	}
}

// DualPipeV twice gives the same bits: losses, norms and final state.
func TestDualPipeVBitIdentical(t *testing.T) {
	j := ppJob("pp=2,dp=2,zero=2,schedule=dualpipev", 5)
	j.Train.GlobalBatch = 16
	a := runJob(t, j, t.TempDir(), "", 0)
	b := runJob(t, j, t.TempDir(), "", 0)
	for s := range a.losses {
		if a.losses[s] != b.losses[s] || a.norms[s] != b.norms[s] {
			t.Errorf("step %d: %v, %v vs %v, %v", s+1, a.losses[s], a.norms[s], b.losses[s], b.norms[s])
		}
	}
	for _, x := range [][2][]float32{{a.w, b.w}, {a.m, b.m}, {a.v, b.v}} {
		if err := sameBits(x[0], x[1]); err != nil {
			t.Error(err)
		}
	}
}

// A DualPipeV run stopped at step 2 and resumed equals the straight run
// bit for bit, and one device samples from its checkpoint.
func TestDualPipeVCheckpoint(t *testing.T) {
	j := ppJob("pp=2,dp=2,zero=1,schedule=dualpipev", 5)
	j.Train.GlobalBatch, j.Train.Steps = 16, 4
	a := runJob(t, j, t.TempDir(), "", 0)
	dir := t.TempDir()
	b1 := runJob(t, j, dir, "", 2)
	b2 := runJob(t, j, dir, dir, 0)
	got := append(append([]float64{}, b1.losses...), b2.losses...)
	for s := range a.losses {
		if s >= len(got) || got[s] != a.losses[s] {
			t.Fatalf("losses %v (split) vs %v (straight)", got, a.losses)
		}
	}
	for _, x := range [][2][]float32{{a.w, b2.w}, {a.m, b2.m}, {a.v, b2.v}} {
		if err := sameBits(x[0], x[1]); err != nil {
			t.Error(err)
		}
	}
	if txt, err := SampleCheckpoint(SampleOptions{Checkpoint: a.sum.Checkpoint, Prompt: "It is", Tokens: 8, Temperature: 0, Seed: 1, Threads: 1}); err != nil || txt == "" {
		t.Fatalf("sample from the pipeline's checkpoint: %q, %v", txt, err)
	}
}

// An MoE model (dropless and with dropped tokens, and with expert
// parallelism over each stage's dp = 2) under DualPipeV trains the single
// device's model (compareRuns), and its memory with a dense
// first block is the planner's prediction within 5% per tag.
func TestDualPipeVMoE(t *testing.T) {
	for _, capacity := range []float64{0, 0.75} {
		t.Run(fmt.Sprintf("capacity=%g", capacity), func(t *testing.T) {
			ref := runJob(t, moeJob("dp=1", 4, capacity), t.TempDir(), "", 0)
			got := runJob(t, moeJob("pp=2,schedule=dualpipev", 4, capacity), t.TempDir(), "", 0)
			l, st := worstDiff(got, ref)
			t.Logf("worst relative difference: losses and norms %.3g, weights and moments (L2) %.3g", l, st)
			compareRuns(t, got, ref)
		})
	}
	t.Run("ep=2", func(t *testing.T) { // expert parallelism over dp = 2 of each stage
		rj := moeJob("dp=1", 4, 0.75)
		rj.Train.GlobalBatch = 16
		ref := runJob(t, rj, t.TempDir(), "", 0)
		j := moeJob("pp=2,dp=2,ep=2,schedule=dualpipev", 4, 0.75)
		j.Train.GlobalBatch = 16 // 4 micro-batches per replica
		got := runJob(t, j, t.TempDir(), "", 0)
		l, st := worstDiff(got, ref)
		t.Logf("worst relative difference: losses and norms %.3g, weights and moments (L2) %.3g", l, st)
		compareRuns(t, got, ref)
	})
	t.Run("memory", func(t *testing.T) {
		j := moeJob("pp=2,schedule=dualpipev", 4, 0)
		j.Model.DenseFirst, j.Model.SharedExperts = 1, 1
		j.Train.GlobalBatch = 8
		holdPredicted(t, j)
	})
}
