package train

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"trellis/checkpoint"
	"trellis/config"
	"trellis/metrics"
)

// biasJob is moeJob's model with auxiliary-loss-free balancing on, at a
// rate that moves the routing within a few steps.
func biasJob(plan string, capacity float64) Job {
	j := moeJob(plan, 3, capacity)
	j.Model.RouterExpertBias, j.Model.RouterBiasUpdateRate = true, 0.01
	return j
}

// biasMoved says whether some block's bias is not zero.
func biasMoved(ex *metrics.Experts) bool {
	for _, b := range ex.Bias {
		for _, v := range b {
			if v != 0 {
				return true
			}
		}
	}
	return false
}

// The bias changes the routing: with it on, the first step routes as
// without (the biases start at zero) and trains the same weights, the
// biases move by ±u, and the second step, from those same weights,
// routes some tokens elsewhere than the unbiased run.
func TestExpertBiasChangesRouting(t *testing.T) {
	on := runJob(t, biasJob("dp=1", 0), t.TempDir(), "", 0)
	off := runJob(t, moeJob("dp=1", 3, 0), t.TempDir(), "", 0)
	if on.losses[0] != off.losses[0] || !reflect.DeepEqual(on.experts[0].Load, off.experts[0].Load) {
		t.Fatalf("step 1: loss %v, loads %v with the bias; %v, %v without", on.losses[0], on.experts[0].Load, off.losses[0], off.experts[0].Load)
	}
	if !biasMoved(on.experts[0]) || off.experts[0].Bias != nil {
		t.Fatalf("step 1's biases: %v (on), %v (off)", on.experts[0].Bias, off.experts[0].Bias)
	}
	for i, b := range on.experts[0].Bias {
		for e, v := range b {
			if math.Abs(float64(v)) != float64(float32(0.01)) && v != 0 {
				t.Errorf("block %d expert %d: bias %g after one step, want ±0.01 or 0", on.experts[0].Layers[i], e, v)
			}
		}
	}
	if reflect.DeepEqual(on.experts[1].Load, off.experts[1].Load) {
		t.Errorf("step 2 (the same weights, biases %v): the bias changed no token's experts: loads %v", on.experts[0].Bias, on.experts[1].Load)
	}
	if on.losses[1] == off.losses[1] {
		t.Errorf("step 2: the same loss %v with and without the bias", on.losses[1])
	}
}

// With the bias on, every plan trains the single device's model: per-step
// losses and gradient norms within 1e-5 relative over 5 steps, final
// weights and Adam moments within 1e-5 relative L2 (compareRuns), the
// same loads every step and the same biases bit for bit — expert
// parallelism at ep = 2 and 4 with dp and ZeRO-1, a pipeline of two
// stages (each moves its own blocks' biases), dropless and capacity.
func TestExpertBiasMatchesSingleDevice(t *testing.T) {
	refs := map[float64]result{}
	for _, tc := range []struct {
		plan     string
		capacity float64
	}{
		{"dp=2,ep=2", 0}, {"dp=4,ep=4", 0}, {"dp=4,ep=2,zero=1", 0}, {"pp=2", 0}, {"pp=2,dp=2,ep=2,zero=1", 0},
		{"dp=2,zero=1", 0.75}, {"dp=4,ep=4,zero=1", 0.75},
	} {
		t.Run(fmt.Sprintf("%s/capacity=%g", tc.plan, tc.capacity), func(t *testing.T) {
			ref, ok := refs[tc.capacity]
			if !ok {
				ref = runJob(t, biasJob("dp=1", tc.capacity), t.TempDir(), "", 0)
				refs[tc.capacity] = ref
			}
			got := runJob(t, biasJob(tc.plan, tc.capacity), t.TempDir(), "", 0)
			compareRuns(t, got, ref)
			for s := range ref.experts {
				r, g := ref.experts[s], got.experts[s]
				if !reflect.DeepEqual(r.Load, g.Load) || !reflect.DeepEqual(r.Bias, g.Bias) {
					t.Errorf("step %d: loads %v, biases %v; one device %v, %v", s+1, g.Load, g.Bias, r.Load, r.Bias)
				}
			}
			if !biasMoved(got.experts[len(got.experts)-1]) {
				t.Errorf("the biases never moved")
			}
		})
	}
}

// DeepSeek-V3's router (sigmoid scores, the gates the chosen unbiased
// scores normalised) with the bias equals one device under ep and a
// pipeline as above; in bf16 ep stays within the 16-bit bound of the one
// device's bf16 run.
func TestExpertBiasSigmoidAndHalf(t *testing.T) {
	sig := func(p string) Job {
		j := biasJob(p, 0)
		j.Model.RouterScore = "sigmoid"
		return j
	}
	ref := runJob(t, sig("dp=1"), t.TempDir(), "", 0)
	for _, p := range []string{"dp=4,ep=4,zero=1", "pp=2,dp=2,ep=2"} {
		t.Run(p+"/router_score=sigmoid", func(t *testing.T) {
			got := runJob(t, sig(p), t.TempDir(), "", 0)
			compareRuns(t, got, ref)
			for s := range ref.experts {
				if !reflect.DeepEqual(ref.experts[s].Bias, got.experts[s].Bias) {
					t.Errorf("step %d: biases %v, one device %v", s+1, got.experts[s].Bias, ref.experts[s].Bias)
				}
			}
		})
	}
	half := runJob(t, biasJob("dp=1,precision=bf16", 0.75), t.TempDir(), "", 0)
	t.Run("dp=2,ep=2,precision=bf16", func(t *testing.T) {
		closeTo(t, runJob(t, biasJob("dp=2,ep=2,precision=bf16", 0.75), t.TempDir(), "", 0), half, moeHalfLoss, halfParState)
	})
}

// A run with the bias split by --until and resumed from its checkpoint
// equals the straight run bit for bit (the biases are saved and loaded);
// resumed under other plans (one device, a pipeline; a pipeline's
// checkpoint under ep), it equals their
// straight runs within 1e-5 and continues their biases exactly.
func TestExpertBiasResume(t *testing.T) {
	job := func(p string) Job {
		j := biasJob(p, 0)
		j.Train.Steps = 4
		return j
	}
	const from = "dp=4,ep=2,zero=1"
	a := runJob(t, job(from), t.TempDir(), "", 0)
	dir := t.TempDir()
	b1 := runJob(t, job(from), dir, "", 2)
	b2 := runJob(t, job(from), dir, dir, 0)
	split := append(append([]float64{}, b1.losses...), b2.losses...)
	if !slices.Equal(split, a.losses) {
		t.Fatalf("losses %v (straight), %v (split and resumed)", a.losses, split)
	}
	for _, x := range [][2][]float32{{a.w, b2.w}, {a.m, b2.m}, {a.v, b2.v}} {
		if err := sameBits(x[0], x[1]); err != nil {
			t.Error(err)
		}
	}
	if !reflect.DeepEqual(a.experts[3].Bias, b2.experts[1].Bias) {
		t.Errorf("step 4's biases: %v straight, %v resumed", a.experts[3].Bias, b2.experts[1].Bias)
	}
	if txt, err := SampleCheckpoint(SampleOptions{Checkpoint: a.sum.Checkpoint, Prompt: "It is", Tokens: 8, Seed: 1, Threads: 1}); err != nil || txt == "" {
		t.Errorf("sample from the checkpoint with biases: %q, %v", txt, err)
	}
	// A checkpoint without the biases is refused by name, never read as zeros.
	plain := runJob(t, moeJob("dp=1", 3, 0), t.TempDir(), "", 0)
	c, err := checkpoint.Open(plain.sum.Checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := readExpertBias(c, job("dp=1").Model); err == nil || !strings.Contains(err.Error(), `no tensor "moe.layers.0.expert_bias"`) {
		t.Errorf("a checkpoint without biases: %v", err)
	}
	// A pipeline's checkpoint: each stage's rank at dp = 0 writes its
	// blocks' biases.
	ppDir := t.TempDir()
	runJob(t, job("pp=2,dp=2,ep=2"), ppDir, "", 2)
	for _, c := range []struct{ from, ckpt, to string }{
		{from, filepath.Join(dir, checkpoint.StepName(2)), "dp=1"},
		{from, filepath.Join(dir, checkpoint.StepName(2)), "pp=2,dp=2,ep=2"},
		{"pp=2,dp=2,ep=2", filepath.Join(ppDir, checkpoint.StepName(2)), "dp=2,ep=2"},
	} {
		to := c.to
		t.Run(c.from+"→"+to, func(t *testing.T) {
			want := runJob(t, job(to), "", "", 0)
			got := runJob(t, job(to), "", c.ckpt, 0)
			for s := range got.losses {
				if w, g := want.losses[s+2], got.losses[s]; math.Abs(g-w) > 1e-5*math.Abs(w) {
					t.Errorf("step %d: loss %.9g, uninterrupted %.9g", s+3, g, w)
				}
				if !reflect.DeepEqual(want.experts[s+2].Bias, got.experts[s].Bias) {
					t.Errorf("step %d: biases %v, uninterrupted %v", s+3, got.experts[s].Bias, want.experts[s+2].Bias)
				}
			}
		})
	}
}

// Issue 26's forced imbalance: biases that send every token's first
// choice to expert 0 (ep = 4: one expert a rank; with 8 experts every
// second choice to expert 2) or both choices to rank 0's experts 0 and 1
// (ep = 2), moved at a rate too small to matter.
// The busiest rank's dispatch — the most rows its experts received in
// one forward, recv_rows_max — is the planner's R = ρ·k·n
// (plan.Job.BusiestExpertRows) for the imbalance ρ the step's loads show
// (the busiest rank's assignments over its balanced share), within 5%
// (measured: exact, ρ = 2 both); every rank's memory per tag is the
// planner's prediction (holdPredicted: the dispatch buffers are sized for
// the worst case before the step, which ep = 2's routing attains). The
// biases fix the busiest rank's rows exactly; where they leave some of
// them to the router (ep = 2 with the first choice alone forced, rank 0's
// expert 1 taking a varying share of the second choices) the high-water
// mark over a step's micro-batches exceeds the step's mean ρ·k·n, by up
// to 6% measured: the planner's ρ is a mean.
func TestForcedImbalancePredicted(t *testing.T) {
	for _, tc := range []struct {
		plan string
		bias []float32
	}{
		{"dp=4,ep=4", []float32{10, 0, 0, 0}},
		// 8 experts, 2 a rank: every first choice expert 0, every second
		// expert 2 — ρ = 2, half the worst case ep·n·min(k, E/ep).
		{"dp=4,ep=4", []float32{10, -10, 5, -10, -10, -10, -10, -10}},
		{"dp=2,ep=2", []float32{10, 10, 0, 0}},
		{"dp=4,ep=2,zero=1", []float32{10, 10, 0, 0}},
	} {
		t.Run(fmt.Sprint(tc.plan, tc.bias), func(t *testing.T) {
			j := moeJob(tc.plan, 4, 0)
			j.Model.Experts = len(tc.bias)
			j.Model.RouterExpertBias, j.Model.RouterBiasUpdateRate = true, 1e-9
			j.Train.GlobalBatch, j.Train.Steps = 8, 2
			bias := map[int][]float32{}
			for l := range j.Model.Layers {
				bias[l] = tc.bias
			}
			got := runJobBias(t, j, "", "", 0, bias)
			s, err := j.resolve()
			if err != nil {
				t.Fatal(err)
			}
			ep, _ := s.enginePlan.Experts()
			E := j.Model.Experts
			for st, ex := range got.experts {
				for i, l := range ex.Layers {
					var total, busiest int64
					for q := range ep {
						var load int64
						for e := q * E / ep; e < (q+1)*E/ep; e++ {
							load += ex.Load[i][e]
						}
						total += load
						busiest = max(busiest, load)
					}
					rho := float64(ep) * float64(busiest) / float64(total)
					pj := j.planJob(s, hostCluster(s), 0, 0)
					pj.Imbalance = rho
					want := pj.BusiestExpertRows(s.enginePlan)
					meas := float64(ex.RecvRowsMax[i])
					if math.Abs(meas-want) > 0.05*want || rho < 1.5 {
						t.Errorf("step %d block %d: loads %v (ρ = %.3g): the busiest rank received %v rows, predicted %.4g", st+1, l, ex.Load[i], rho, meas, want)
					}
					if st == 0 && i == 0 {
						t.Logf("loads %v: ρ = %.3g, busiest rank's rows %v, predicted %.4g (worst case %d)", ex.Load[i], rho, meas, want,
							j.Model.ExpertRows(j.Train.MicroBatch*j.Model.SeqLen, ep, 1))
					}
				}
			}
			holdPredictedBias(t, j, bias)
		})
	}
}

// The keys load from a job file's [model] and are validated by name: the
// rate needs the bias, and lies in [0, 1].
func TestExpertBiasConfig(t *testing.T) {
	for _, c := range []struct {
		set  []string
		want string
	}{
		{[]string{"model.router_expert_bias=true", "model.router_bias_update_rate=0.002"}, ""},
		{[]string{"model.router_bias_update_rate=0.002"}, "model.router_bias_update_rate=0.002 is set without model.router_expert_bias=true"},
		{[]string{"model.router_expert_bias=true", "model.router_bias_update_rate=1.5"}, "model.router_bias_update_rate=1.5: want a step in (0, 1]"},
	} {
		j := DefaultJob()
		if err := config.Load(&j, "../examples/moe.toml", c.set); err != nil {
			t.Fatal(err)
		}
		_, err := j.resolve()
		switch {
		case c.want == "" && (err != nil || !j.Model.RouterExpertBias || j.Model.BiasRate() != 0.002):
			t.Errorf("%v: %v, bias %v rate %g", c.set, err, j.Model.RouterExpertBias, j.Model.BiasRate())
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: error %v, want %q", c.set, err, c.want)
		}
	}
}

// The end-of-run report names each block's busiest rank's rows and the
// range of its expert biases.
func TestExpertBiasReport(t *testing.T) {
	var out bytes.Buffer
	j := biasJob("dp=2,ep=2", 0)
	j.Train.Steps = 2
	if _, err := Run(context.Background(), Options{Job: j, Out: &out}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"block 0: ", "rows on a rank", "expert bias -0.02..0.02"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}
