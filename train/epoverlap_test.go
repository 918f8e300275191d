package train

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

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
// final weights and Adam moments, in fp32 and bf16, with capacity drops
// and dropless, with ZeRO-1/2 over edp replicas and full recomputation
// (the paired forward accumulates nothing; the backwards keep their
// order).
func TestEPOverlapBitIdentical(t *testing.T) {
	for _, tc := range []struct {
		plan     string
		capacity float64
	}{
		{"dp=2,ep=2", 0.75}, {"dp=2,ep=2", 0},
		{"dp=2,ep=2,precision=bf16", 0.75}, {"dp=2,ep=2,precision=bf16", 0},
		{"dp=4,ep=2,zero=2", 0.75}, {"dp=2,ep=2,zero=1,recompute=full", 0},
	} {
		t.Run(fmt.Sprintf("%s/capacity=%g", tc.plan, tc.capacity), func(t *testing.T) {
			ref := runJob(t, epOverlapJob(tc.plan, tc.capacity), t.TempDir(), "", 0)
			got := runJob(t, epOverlapJob(tc.plan+",ep_overlap=on", tc.capacity), t.TempDir(), "", 0)
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
				if !reflect.DeepEqual(r.Load, g.Load) || !reflect.DeepEqual(r.Dropped, g.Dropped) || r.AuxLoss != g.AuxLoss {
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

// ep_overlap=on is refused by name where the pair could issue a
// collective in a timing-dependent order, or has nothing to hide.
func TestEPOverlapRefused(t *testing.T) {
	for _, tc := range []struct{ plan, want string }{
		{"dp=2,ep_overlap=on", "needs ep > 1"},
		{"dp=2,ep=2,pp=2,ep_overlap=on", "pp=2"},
		{"dp=2,ep=2,zero=3,ep_overlap=on", "zero=3"},
		{"dp=2,ep=2,tp=2,sp=on,etp=2,ep_overlap=on", "tp=2"},
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
		if _, err := j.resolve(); err == nil || !strings.Contains(err.Error(), "ep_overlap=on") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a refusal naming ep_overlap=on and %q", tc.plan, err, tc.want)
		}
	}
}
