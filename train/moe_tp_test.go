package train

import (
	"fmt"
	"math"
	"reflect"
	"testing"
)

// moeTPPlans are the fp32 plans of TestMoETensorParallelMatchesSingleDevice:
// the experts split over tp (etp = tp) with and without sequence
// parallelism (which Megatron-Core requires with experts, and the
// planner on clusters other than the engine's), composed with dp and ZeRO, expert parallelism, a pipeline,
// zero-bubble's split backward and full recomputation; each in capacity
// mode (the same tokens dropped as on one device) and dropless.
var moeTPPlans = []string{
	"tp=2,etp=2", "tp=2,etp=2,sp=on", "dp=2,tp=2,etp=2,sp=on,zero=3", "dp=2,tp=2,etp=2,ep=2,zero=1", "dp=2,tp=2,etp=2,sp=on,ep=2,zero=1",
	"pp=2,tp=2,etp=2,sp=on", "pp=2,tp=2,etp=2,schedule=zb-h1", "tp=2,etp=2,sp=on,recompute=full",
}

// Every plan of moeTPPlans trains the single device's MoE model (dropout
// on, the aux loss on, 4 experts of width 24, top-2): per-step losses and
// gradient norms within 1e-5 relative over 5 steps, final weights and
// Adam moments within 1e-5 (compareRuns); a model with a dense first
// block and a shared expert too; bf16 within the 16-bit bound.
func TestMoETensorParallelMatchesSingleDevice(t *testing.T) {
	for _, capacity := range []float64{0.75, 0} {
		ref := runJob(t, moeJob("dp=1", 3, capacity), t.TempDir(), "", 0)
		for _, p := range moeTPPlans {
			if capacity == 0 && p != "tp=2,etp=2" && p != "tp=2,etp=2,sp=on" && p != "dp=2,tp=2,etp=2,sp=on,ep=2,zero=1" {
				continue
			}
			t.Run(fmt.Sprintf("%s/capacity=%g", p, capacity), func(t *testing.T) {
				compareRuns(t, runJob(t, moeJob(p, 3, capacity), t.TempDir(), "", 0), ref)
			})
		}
	}
	mixed := func(p string) Job {
		j := moeJob(p, 3, 0.75)
		j.Model.DenseFirst, j.Model.SharedExperts = 1, 1
		return j
	}
	mref := runJob(t, mixed("dp=1"), t.TempDir(), "", 0)
	for _, p := range []string{"tp=2,etp=2", "tp=2,etp=2,sp=on,pp=2"} {
		t.Run(p+"/dense_first=1,shared_experts=1", func(t *testing.T) {
			compareRuns(t, runJob(t, mixed(p), t.TempDir(), "", 0), mref)
		})
	}
	href := moeJob("dp=1,precision=bf16", 3, 0.75)
	for _, p := range []string{"tp=2,etp=2,sp=on", "dp=2,tp=2,etp=2,sp=on,ep=2"} {
		t.Run(p+",precision=bf16", func(t *testing.T) {
			untilFlip(t, moeJob(p+",precision=bf16", 3, 0.75), href, moeHalfLoss)
		})
	}
}

// untilFlip holds a 16-bit run of j to the one-device run of ref in the
// same precision while both route alike. Under tp the attention's partial
// sums round differently from one device's (the dense bound halfParLoss
// allows for that), so after a few steps a token at a near tie between
// two experts may choose the other one: measured (2026-12-02) on
// tp=2,etp=2,sp=on bf16, every step's losses and norms within 5e-7 until one
// assignment of 576 moved at step 4, which moved that step's gradient
// norm by 3.2e-3 and its loss by 1e-5 (under cp=2, whose ring attention
// rounds differently again, at step 2). So: the routing (loads and drops
// per expert, --metrics) equals one device's at step 1 at least (a wrong
// product or reduction moves it there); until it departs, losses and gradient norms are within
// halfParLoss; every step's loss within bound (moeHalfLoss, or
// moeHalfDropless where nothing is dropped).
func untilFlip(t *testing.T, j, ref Job, bound float64) {
	t.Helper()
	got, want := moeMetrics(t, j), moeMetrics(t, ref)
	if len(got) != len(want) || len(want) < 5 {
		t.Fatalf("%d and %d steps logged, want 5 or more", len(got), len(want))
	}
	flip := len(want)
	for s := range want {
		g, w := got[s].Experts, want[s].Experts
		if !reflect.DeepEqual(g.Load, w.Load) || !reflect.DeepEqual(g.Dropped, w.Dropped) {
			flip = s
			t.Logf("step %d: routed %v (dropped %v), one device %v (%v)", s+1, g.Load, g.Dropped, w.Load, w.Dropped)
			break
		}
	}
	if flip < 1 {
		t.Errorf("the routing departs from one device's at step %d", flip+1)
	}
	for s := range want {
		b := bound
		checks := [][2]float64{{got[s].Loss, want[s].Loss}}
		if s < flip {
			b = halfParLoss
			checks = append(checks, [2]float64{got[s].GradNorm, want[s].GradNorm})
		}
		for _, x := range checks {
			if d := math.Abs(x[0]-x[1]) / x[1]; !(d <= b) {
				t.Errorf("step %d: %.9g, single device %.9g (rel diff %.3g > %g)", s+1, x[0], x[1], d, b)
			}
		}
	}
}

// Each rank's memory with the experts split over tp is the planner's
// prediction, every tag within 5% (holdPredicted).
func TestMoETensorParallelMemoryPredicted(t *testing.T) {
	for _, p := range []string{"tp=2,etp=2", "tp=2,etp=2,sp=on,precision=bf16", "dp=2,tp=2,etp=2,sp=on,ep=2,zero=3", "dp=2,tp=2,etp=2,ep=2,zero=1", "pp=2,tp=2,etp=2,sp=on"} {
		t.Run(p, func(t *testing.T) {
			j := moeJob(p, 4, 0.75)
			j.Train.GlobalBatch = 8
			j.Model.SharedExperts = 1
			holdPredicted(t, j)
		})
	}
}

// An MoE checkpoint resharded across the experts' tensor-parallel split:
// one device → tp=2 (each expert's columns split) → tp=2 with ep=2 and
// ZeRO-3 and back, the next losses within 1e-5 of the uninterrupted run
// under the new plan (bit for bit under the same plan; reshardMoE).
func TestMoETensorParallelReshard(t *testing.T) {
	reshardMoE(t, []string{"dp=1", "tp=2,etp=2,sp=on", "dp=2,tp=2,etp=2,sp=on,ep=2,zero=3"})
}
