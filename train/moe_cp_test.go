package train

import (
	"fmt"
	"testing"
)

// moeCPPlans are the fp32 plans of TestMoEContextParallelMatchesSingleDevice:
// each rank holds two chunks of every sequence and routes them with the
// micro-batch's capacity and aux loss (model's moecp.go), alone and with
// dp/ZeRO, tp ± sp with the experts split (etp = tp), a pipeline, full
// recomputation.
var moeCPPlans = []string{
	"cp=2", "dp=2,cp=2,zero=1", "cp=2,tp=2,sp=on,etp=2", "pp=2,cp=2", "cp=2,recompute=full", "cp=2,zero=3,dp=2",
}

// Every plan of moeCPPlans trains the single device's MoE model (dropout
// and the aux loss on) within 1e-5 over 5 steps, in capacity mode (the
// same assignments dropped: TestMoEMetrics' counts are compared too) and
// dropless; a sigmoid router with a dense first block and a shared
// expert, and DeepSeek-V3's expert bias, too.
func TestMoEContextParallelMatchesSingleDevice(t *testing.T) {
	for _, capacity := range []float64{0.75, 0} {
		ref := runJob(t, moeJob("dp=1", 3, capacity), t.TempDir(), "", 0)
		for _, p := range moeCPPlans {
			if capacity == 0 && p != "cp=2" && p != "dp=2,cp=2,zero=1" {
				continue
			}
			t.Run(fmt.Sprintf("%s/capacity=%g", p, capacity), func(t *testing.T) {
				compareRuns(t, runJob(t, moeJob(p, 3, capacity), t.TempDir(), "", 0), ref)
			})
		}
	}
	long := func(p string) Job { // 2·cp = 8 chunks of 2 tokens
		j := moeJob(p, 2, 0.75)
		j.Model.SeqLen = 16
		return j
	}
	lref := runJob(t, long("dp=1"), t.TempDir(), "", 0)
	t.Run("cp=4/seq_len=16", func(t *testing.T) {
		compareRuns(t, runJob(t, long("cp=4"), t.TempDir(), "", 0), lref)
	})
	mixed := func(p string) Job {
		j := moeJob(p, 3, 0.75)
		j.Model.DenseFirst, j.Model.SharedExperts, j.Model.RouterScore = 1, 1, "sigmoid"
		j.Model.RouterExpertBias, j.Model.RouterBiasUpdateRate = true, 0.05
		return j
	}
	mref := runJob(t, mixed("dp=1"), t.TempDir(), "", 0)
	for _, p := range []string{"cp=2", "pp=2,cp=2,dp=2"} {
		t.Run(p+"/sigmoid,dense_first=1,shared_experts=1,router_expert_bias", func(t *testing.T) {
			compareRuns(t, runJob(t, mixed(p), t.TempDir(), "", 0), mref)
		})
	}
	ref, got := moeMetrics(t, moeJob("dp=1", 3, 0.75)), moeMetrics(t, moeJob("cp=2,dp=2", 3, 0.75))
	for s := range ref {
		r, g := ref[s].Experts, got[s].Experts
		if fmt.Sprint(r.Load, r.Dropped) != fmt.Sprint(g.Load, g.Dropped) || fmt.Sprintf("%.6g", r.AuxLoss) != fmt.Sprintf("%.6g", g.AuxLoss) {
			t.Errorf("step %d: cp=2,dp=2 routed %v (dropped %v, aux %g), one device %v (%v, %g)", s+1, g.Load, g.Dropped, g.AuxLoss, r.Load, r.Dropped, r.AuxLoss)
		}
	}
	href := moeJob("dp=1,precision=bf16", 3, 0.75)
	t.Run("cp=2,precision=bf16", func(t *testing.T) {
		untilFlip(t, moeJob("cp=2,precision=bf16", 3, 0.75), href, moeHalfLoss)
	})
}

// Each rank's memory with the experts under cp is the planner's
// prediction, every tag within 5% (holdPredicted).
func TestMoEContextParallelMemoryPredicted(t *testing.T) {
	for _, p := range []string{"cp=2", "cp=2,dp=2,zero=1,precision=bf16", "cp=2,tp=2,sp=on,etp=2", "pp=2,cp=2"} {
		t.Run(p, func(t *testing.T) {
			j := moeJob(p, 4, 0.75)
			j.Train.GlobalBatch = 8
			holdPredicted(t, j)
		})
	}
}

// Expert parallelism with cp: the ep groups are ep consecutive dp ranks
// at one cp index, the expert-data-parallel group spans the cp axis too
// (the experts' gradients average over dp/ep·cp ranks); equal to one
// device within 1e-5 with ZeRO-1 and ZeRO-3, dropless and with drops.
func TestEPContextParallelMatchesSingleDevice(t *testing.T) {
	for _, capacity := range []float64{0.75, 0} {
		ref := runJob(t, moeJob("dp=1", 3, capacity), t.TempDir(), "", 0)
		for _, p := range []string{"dp=2,cp=2,ep=2", "dp=2,cp=2,ep=2,zero=3", "dp=4,cp=2,ep=2,zero=1", "pp=2,dp=2,cp=2,ep=2"} {
			t.Run(fmt.Sprintf("%s/capacity=%g", p, capacity), func(t *testing.T) {
				compareRuns(t, runJob(t, moeJob(p, 3, capacity), t.TempDir(), "", 0), ref)
			})
		}
	}
	t.Run("memory/dp=2,cp=2,ep=2,zero=1", func(t *testing.T) {
		j := moeJob("dp=2,cp=2,ep=2,zero=1", 4, 0.75)
		j.Train.GlobalBatch = 8
		holdPredicted(t, j)
	})
}

// The experts compose along every axis at once and with every schedule:
// DualPipeV and interleaved pipelines under cp, DualPipeV under tp,
// zero-bubble's split backward under cp, dp × cp × ep × tp and ep = 4 ×
// tp = 2 with ZeRO-3 on eight ranks, each equal to one device within 1e-5 (capacity 0.75: the same
// assignments dropped).
func TestMoEComposesMatchSingleDevice(t *testing.T) {
	ref := runJob(t, moeJob("dp=1", 4, 0.75), t.TempDir(), "", 0)
	for _, p := range []string{"pp=2,cp=2,schedule=dualpipev", "pp=2,vpp=2,cp=2,schedule=interleaved",
		"pp=2,tp=2,sp=on,etp=2,schedule=dualpipev", "pp=2,cp=2,schedule=zb-h1", "dp=2,cp=2,ep=2,tp=2,sp=on,etp=2",
		"dp=4,tp=2,etp=2,ep=4,zero=3"} {
		t.Run(p, func(t *testing.T) {
			compareRuns(t, runJob(t, moeJob(p, 4, 0.75), t.TempDir(), "", 0), ref)
		})
	}
}

// More experts than a cp rank's gathered choices (32 experts, top-1, 4
// tokens a rank): the aux loss's sums have their own E values (they once
// borrowed the choices' buffer, too short here).
func TestMoEContextParallelManyExperts(t *testing.T) {
	job := func(p string) Job {
		j := moeJob(p, 2, 0)
		j.Model.Experts, j.Model.TopK, j.Model.SeqLen = 32, 1, 8
		j.Train.MicroBatch, j.Train.GlobalBatch = 1, 4
		return j
	}
	compareRuns(t, runJob(t, job("cp=2"), t.TempDir(), "", 0), runJob(t, job("dp=1"), t.TempDir(), "", 0))
	j := job("cp=2")
	j.Train.GlobalBatch = 8
	holdPredicted(t, j)
}
