package train

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"trellis/checkpoint"
	"trellis/device"
	"trellis/model"
)

// TestBF16TracksFP32 trains the tiny model 30 steps in fp32, in bf16 and
// in fp16 (loss scaling from 65536): every 16-bit loss within 3% of fp32's
// and the last within 1%, and the 16-bit run not the fp32 one (its GEMMs ran).
func TestBF16TracksFP32(t *testing.T) {
	j := tinyJob("")
	j.Train.Steps, j.Train.Warmup = 30, 3
	fp32 := runJob(t, j, "", "", 0)
	for _, prec := range []string{"bf16", "fp16"} {
		j.Parallel.Plan = "precision=" + prec
		tracks(t, prec, fp32, runJob(t, j, "", "", 0))
	}
}

// tracks holds a 16-bit run's losses to the fp32 run's (TestBF16TracksFP32):
// every step within 3%, the last within 1%.
func tracks(t *testing.T, prec string, fp32, bf16 result) {
	t.Helper()
	n := len(fp32.losses)
	if len(bf16.losses) != n || n < 5 {
		t.Fatalf("%d and %d steps logged, want the same, at least 5", len(bf16.losses), n)
	}
	same := true
	for i, want := range fp32.losses {
		got := bf16.losses[i]
		same = same && got == want
		if d := math.Abs(got-want) / want; d > 0.03 {
			t.Errorf("%s: step %d: loss %.5g, fp32 %.5g (rel diff %.3g > 0.03)", prec, i+1, got, want, d)
		}
	}
	last, ref := bf16.losses[n-1], fp32.losses[n-1]
	if d := math.Abs(last-ref) / ref; d > 0.01 {
		t.Errorf("%s: last loss %.5g, fp32 %.5g (rel diff %.3g > 0.01)", prec, last, ref, d)
	}
	if same {
		t.Errorf("%s losses equal fp32's bit for bit: the 16-bit path did not run", prec)
	}
	t.Logf("step %d: fp32 %.5f %s %.5f", n, ref, prec, last)
}

// TestBF16Plans runs bf16 under data parallelism and ZeRO 1-3 against the
// single-device bf16 run (within 1e-3 relative over 5 steps: the fp32
// reduction order differs, and a master weight that differs in its last
// bits may round to a neighbouring bf16), ZeRO-1 against dp=2's (the same
// reduction of the same accumulated gradients: bit-identical losses, the
// master weights sharded and their 16-bit roundings gathered included)
// and ZeRO-3 against ZeRO-2 (the same per-micro-batch reductions, which
// average each micro-batch's gradient before they are added: not dp=2's
// sums, Σ_k avg_r g ≠ avg_r Σ_k g in fp32), twice for bit-identity, and
// holds each rank's state to the formula: bf16 weights 2 B/param
// (param), fp32 master 4 + Adam moments 8 (optim) and fp32 gradients 4
// (grad), each sharded as the ZeRO stage says — the master weights with
// the moments from ZeRO-1 on; under ZeRO-3 the bf16 weights are the
// fetched unit's rounding, 2u. The runs clip nothing: dp=2 and ZeRO sum
// the gradient norm's squares in different orders, so a float32 clip
// factor could differ by an ulp.
func TestBF16Plans(t *testing.T) {
	tinyJob := func(plan string) Job {
		j := tinyJob(plan)
		j.Train.GradClip = 0
		return j
	}
	ref := runJob(t, tinyJob("precision=bf16"), "", "", 0)
	dp2 := runJob(t, tinyJob("dp=2,precision=bf16"), "", "", 0)
	zero2 := runJob(t, tinyJob("dp=2,zero=2,precision=bf16"), "", "", 0)
	P := float64(tinyJob("").Model.ParamCount())
	u := float64(maxUnit(tinyJob("").Model))
	for _, tc := range []struct {
		plan               string
		param, grad, optim float64 // bytes per parameter on each rank
		unit               float64 // param: and bytes per parameter of the largest unit
	}{
		{"precision=bf16", 2, 4, 12, 0},
		{"dp=2,precision=bf16", 2, 4, 12, 0},
		{"dp=2,zero=1,precision=bf16", 2, 4, 12.0 / 2, 0},
		{"dp=2,zero=2,precision=bf16", 2, 4.0 / 2, 12.0 / 2, 0},
		{"dp=2,zero=3,precision=bf16", 0, 4.0 / 2, 12.0 / 2, 2},
	} {
		a := runJob(t, tinyJob(tc.plan), "", "", 0)
		b := runJob(t, tinyJob(tc.plan), "", "", 0)
		for i, want := range ref.losses {
			if a.losses[i] != b.losses[i] {
				t.Errorf("%s: step %d: loss %.9g then %.9g: not bit-identical", tc.plan, i+1, a.losses[i], b.losses[i])
			}
			if d := math.Abs(a.losses[i]-want) / want; d > 1e-3 {
				t.Errorf("%s: step %d: loss %.7g, single device %.7g (rel diff %.3g > 1e-3)", tc.plan, i+1, a.losses[i], want, d)
			}
			same := dp2
			if strings.Contains(tc.plan, "zero=2") || strings.Contains(tc.plan, "zero=3") {
				same = zero2
			}
			if strings.HasPrefix(tc.plan, "dp=2") && a.losses[i] != same.losses[i] {
				t.Errorf("%s: step %d: loss %.9g, its twin's %.9g: not bit-identical", tc.plan, i+1, a.losses[i], same.losses[i])
			}
		}
		for r, rs := range a.sum.Ranks {
			for _, w := range []struct {
				tag  device.Tag
				perP float64
			}{{device.Param, tc.param}, {device.Grad, tc.grad}, {device.Optim, tc.optim}} {
				got, want := float64(rs.Peak[w.tag]), w.perP*P
				if w.tag == device.Param {
					want += tc.unit * u
				}
				// ZeRO pads its flat buffers to whole chunks: allow 2%.
				if math.Abs(got-want) > 0.02*want {
					t.Errorf("%s rank %d: %s peak %.0f B, want %.3g·Ψ = %.0f B", tc.plan, r, w.tag, got, w.perP, want)
				}
			}
		}
	}
}

// TestHalfPrecisionAccepted: bf16, fp16 and fp8 are accepted with tp, pp
// and the 3D plans; an fp8 recipe the engine does not know is refused by
// name.
func TestHalfPrecisionAccepted(t *testing.T) {
	for _, plan := range []string{"tp=2,precision=bf16", "pp=2,precision=bf16", "tp=2,sp=on,precision=fp16",
		"pp=2,tp=2,dp=2,zero=1,precision=fp16", "pp=2,schedule=zb-h1,precision=fp16", "tp=2,precision=fp8",
		"pp=2,tp=2,dp=2,zero=3,precision=fp8"} {
		if _, err := tinyJob(plan).resolve(); err != nil {
			t.Errorf("%s: %v", plan, err)
		}
	}
	j := tinyJob("tp=2,precision=fp8")
	j.Train.FP8Recipe = "mxfp8"
	_, err := j.resolve()
	if err == nil || !strings.Contains(err.Error(), `train.fp8_recipe="mxfp8" must be delayed or blockwise`) {
		t.Errorf("fp8_recipe=mxfp8: got %v, want an error naming train.fp8_recipe", err)
	}
}

// TestBF16Planned: under bf16 and fp16 the engine keeps its stash in
// 16-bit but for the residual stream, the statistics, the attention
// probabilities and the head's softmax and losses (actFormula16), every
// rank's act peak is that formula's, 2·(14L + 1)·bsh bytes below fp32's,
// and the planner predicts it (engine_stash) exactly, and the state tags
// (the engine's bf16 formula of docs/ARCHITECTURE.md, "Mixed precision",
// which a CPU host cluster file gets) and the workspace within 2% (bf16:
// the cluster file has no fp16 peak to plan with).
func TestBF16Planned(t *testing.T) {
	for _, plan := range []string{"precision=bf16", "dp=2,precision=bf16", "dp=2,zero=1,precision=bf16",
		"dp=2,zero=2,precision=bf16", "dp=2,zero=3,precision=bf16", "precision=fp16"} {
		j := tinyJob(plan)
		j.Train.Steps = 1
		got := runJob(t, j, "", "", 0)
		want := actFormula16(j)
		c := j.Model
		if fp32, bsh := actFormula(j, 1, false), int64(j.Train.MicroBatch*c.SeqLen*c.Hidden); fp32-want != 2*(14*int64(c.Layers)+1)*bsh {
			t.Errorf("%s: act %d bytes, fp32 %d: saves %d, want 2·(14L + 1)·bsh = %d", plan, want, fp32, fp32-want, 2*(14*int64(c.Layers)+1)*bsh)
		}
		s, err := j.resolve()
		if err != nil {
			t.Fatal(err)
		}
		e := estimate(j.Model, j.Train.MicroBatch, s.enginePlan, s.threads)
		for _, r := range got.sum.Ranks {
			// The refusal estimate's runner (stash + scratch) stays a lower bound, and within 10%.
			if m := float64(r.Peak[device.Act] + r.Peak[device.Workspace]); e.runner > m || e.runner < 0.9*m {
				t.Errorf("%s rank %d: estimated runner %.0f bytes, measured act + workspace %.0f", plan, r.Rank, e.runner, m)
			}
			// So does its state, within the unit terms it leaves out (20%: the tiny model's unit is a third of Ψ).
			if m := float64(r.Peak[device.Param] + r.Peak[device.Grad] + r.Peak[device.Optim]); e.state > m || e.state < 0.8*m {
				t.Errorf("%s rank %d: estimated state %.0f bytes, measured param + grad + optim %.0f", plan, r.Rank, e.state, m)
			}
		}
		if strings.Contains(plan, "fp16") {
			for _, r := range got.sum.Ranks {
				if a := r.Peak[device.Act]; a != want {
					t.Errorf("%s rank %d: act peak %d bytes, formula %d", plan, r.Rank, a, want)
				}
			}
			continue
		}
		if p := plannedAct(t, j); p != want {
			t.Errorf("%s: the planner predicts act %d bytes, the formula %d", plan, p, want)
		}
		pm := plannedMemory(t, j)
		for _, r := range got.sum.Ranks {
			if a := r.Peak[device.Act]; a != want {
				t.Errorf("%s rank %d: act peak %d bytes, formula %d", plan, r.Rank, a, want)
			}
			for _, w := range []struct {
				tag  device.Tag
				pred int64
			}{{device.Param, pm.Param}, {device.Grad, pm.Grad}, {device.Optim, pm.Optim}, {device.Workspace, pm.Workspace}} {
				if m := r.Peak[w.tag]; math.Abs(float64(m-w.pred)) > 0.02*float64(w.pred) {
					t.Errorf("%s rank %d: %s peak %d bytes, the planner predicts %d", plan, r.Rank, w.tag, m, w.pred)
				}
			}
		}
	}
}

// actFormula16 is actFormula for a one-rank stash in bf16 or fp16
// (model/stash16.go): 4 bytes for the L+1 residuals, each layer's res2,
// its four LayerNorm statistics and its A = a·b·s² probabilities (a·b·s
// log-sum-exps with flash), ln_f's statistics, the probabilities and the
// losses; 2 bytes for each layer's ln1, qkv, atty, ln2, fc, fcg (14·bsh)
// and ln_f:
//
//	4·(L·(2bsh + 4bs + A) + bsh + 2bs + bs·V + bs) + 2·(14·L·bsh + bsh) + 16bs
func actFormula16(j Job) int64 {
	c := j.Model
	s, b, h, a, L, V := int64(c.SeqLen), int64(j.Train.MicroBatch), int64(c.Hidden), int64(c.Heads), int64(c.Layers), int64(c.Vocab)
	bs := b * s
	A := a * b * s * s
	if strings.Contains(j.Parallel.Plan, "flash=on") {
		A = a * b * s
	}
	return 4*(L*(2*bs*h+4*bs+A)+bs*h+2*bs+bs*V+bs) + 2*(14*L*bs*h+bs*h) + 16*bs
}

// maxUnit is the largest unit's parameter count.
func maxUnit(c model.Config) int {
	n := 0
	for _, u := range c.Layout().Units {
		n = max(n, u.Size)
	}
	return n
}

// TestBF16Resume: a bf16 run split by --until and resumed equals the
// straight run bit for bit (the checkpoint holds the fp32 master weights;
// the bf16 copy is rounded from them), alone, under ZeRO-1 (each rank's
// master shards, its 16-bit weights gathered again), under ZeRO-3 and on
// the 3D plan.
func TestBF16Resume(t *testing.T) {
	for _, plan := range []string{"precision=bf16", "dp=2,zero=1,precision=bf16", "dp=2,zero=3,precision=bf16", "pp=2,tp=2,sp=on,dp=2,zero=1,precision=bf16"} {
		j := tinyJob(plan)
		j.Train.Steps = 4
		a := runJob(t, j, t.TempDir(), "", 0)
		dir := t.TempDir()
		b1 := runJob(t, j, dir, "", 2)
		b2 := runJob(t, j, dir, dir, 0)
		got := append(append([]float64{}, b1.losses...), b2.losses...)
		if len(got) != len(a.losses) {
			t.Fatalf("%s: %d + %d steps, want %d", plan, len(b1.losses), len(b2.losses), len(a.losses))
		}
		for s := range a.losses {
			if got[s] != a.losses[s] {
				t.Errorf("%s: step %d: loss %v (split) vs %v (straight)", plan, s+1, got[s], a.losses[s])
			}
		}
		if err := sameBits(b2.w, a.w); err != nil {
			t.Errorf("%s: weights: %v", plan, err)
		}
	}
}

// fp16Metrics reads a run's --metrics lines' skipped and loss_scale.
type fp16Line struct {
	Step      int     `json:"step"`
	Skipped   bool    `json:"skipped"`
	LossScale float64 `json:"loss_scale"`
}

func runFP16(t *testing.T, j Job, dir, resume string, until int) (result, []fp16Line) {
	t.Helper()
	if dir != "" {
		j.Checkpoint = checkpoint.Config{Dir: dir}
	}
	var metrics bytes.Buffer
	sum, err := Run(context.Background(), Options{Job: j, Resume: resume, Until: until, Metrics: &metrics})
	if err != nil {
		t.Fatalf("plan %s: %v", j.Parallel.Plan, err)
	}
	res := result{sum: sum}
	var lines []fp16Line
	for _, ln := range strings.Split(strings.TrimSpace(metrics.String()), "\n") {
		var m metricsLine
		var f fp16Line
		if err := json.Unmarshal([]byte(ln), &m); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(ln), &f); err != nil {
			t.Fatal(err)
		}
		res.losses = append(res.losses, m.Loss)
		lines = append(lines, f)
	}
	if dir != "" {
		res.w, res.m, res.v = readState(t, j.Model, sum.Checkpoint)
	}
	return res, lines
}

// TestFP16Overflow induces an overflow with a loss scale of 2^40: the
// fp16 gradients are inf, so the first steps are skipped on every rank
// ("skipped":true in --metrics), the scale halves each time until the
// gradients fit, the weights and moments of the skipped steps are those of
// the start (nothing lost: the run then trains), and a resumed run
// continues with the saved scale, bit for bit.
func TestFP16Overflow(t *testing.T) {
	for _, plan := range []string{"precision=fp16", "dp=2,zero=2,precision=fp16", "dp=2,zero=3,precision=fp16",
		"tp=2,precision=fp16", "pp=2,schedule=1f1b,precision=fp16", "pp=2,tp=2,dp=2,zero=1,precision=fp16"} {
		j := tinyJob(plan)
		j.Train.LossScale, j.Train.LossScaleWindow = 0x1p40, 2
		j.Train.Steps = 1
		one, lines := runFP16(t, j, t.TempDir(), "", 0)
		if len(lines) != 1 || !lines[0].Skipped || lines[0].LossScale != 0x1p40 {
			t.Fatalf("%s: step 1: %+v, want skipped at scale 2^40", plan, lines)
		}
		w0 := make([]float32, j.Model.Layout().Size)
		if err := model.InitRange(j.Model, j.Train.Seed, w0, 0, len(w0)); err != nil {
			t.Fatal(err)
		}
		if err := sameBits(one.w, w0); err != nil {
			t.Errorf("%s: weights after a skipped step differ from the initial ones: %v", plan, err)
		}
		for i, v := range one.m {
			if v != 0 || one.v[i] != 0 {
				t.Fatalf("%s: Adam moment %d is %g, %g after a skipped step, want 0", plan, i, v, one.v[i])
			}
		}
		j.Train.Steps = 50
		full, lines := runFP16(t, j, t.TempDir(), "", 0)
		skipped := 0
		for i, l := range lines {
			if l.Skipped {
				skipped++
				if i+1 < len(lines) && !lines[i+1].Skipped && lines[i+1].LossScale != l.LossScale/2 {
					t.Fatalf("%s: step %d skipped at %g, step %d runs at %g, want half", plan, i+1, l.LossScale, i+2, lines[i+1].LossScale)
				}
			}
		}
		if skipped == 0 || skipped == len(lines) || !(full.losses[len(full.losses)-1] < full.losses[skipped]) {
			t.Fatalf("%s: %d of %d steps skipped, loss %g after them and %g at the end: want some skipped, then training", plan, skipped, len(lines), full.losses[skipped], full.losses[len(full.losses)-1])
		}
		t.Logf("%s: %d steps skipped, then scale %g; loss %.4f -> %.4f", plan, skipped, lines[skipped].LossScale, full.losses[skipped], full.losses[len(full.losses)-1])
		// Resume mid-way: the scale comes back from the checkpoint.
		dir := t.TempDir()
		half := skipped + 3
		runFP16(t, j, dir, "", half)
		rest, rlines := runFP16(t, j, dir, dir, 0)
		for i, l := range rlines {
			if want := lines[half+i]; l != want {
				t.Fatalf("%s: resumed step %d: %+v, straight %+v", plan, half+i+1, l, want)
			}
			if rest.losses[i] != full.losses[half+i] {
				t.Fatalf("%s: resumed step %d: loss %v, straight %v", plan, half+i+1, rest.losses[i], full.losses[half+i])
			}
		}
	}
}

// TestBF16Recompute: under bf16 with its 16-bit stash, selective and full
// recomputation, with and without flash, alone, under ZeRO-3 and under
// tp=2 (± sp: the rank's 16-bit slices, model/tp16.go), with dropout,
// train bit-identically to no recomputation over 5 steps (losses,
// gradient norms, final weights), a run repeated is bit-identical, and
// every rank's act peak is the planner's prediction to the byte.
func TestBF16Recompute(t *testing.T) {
	for _, base := range []string{"precision=bf16", "dp=2,zero=3,precision=bf16", "tp=2,precision=bf16", "tp=2,sp=on,precision=bf16"} {
		for _, flash := range []string{"off", "on"} {
			mk := func(rc string) Job {
				return tpJob(base+",flash="+flash+",recompute="+rc, 0.1)
			}
			ref := runJob(t, mk("none"), t.TempDir(), "", 0)
			if len(ref.losses) != 5 || len(ref.w) == 0 {
				t.Fatalf("%s: %d steps logged, %d weights read, want 5 and all", base, len(ref.losses), len(ref.w))
			}
			for _, rc := range []string{"none", "selective", "full"} {
				t.Run(fmt.Sprintf("%s/flash=%s/recompute=%s", base, flash, rc), func(t *testing.T) {
					j := mk(rc)
					got := runJob(t, j, t.TempDir(), "", 0) // for none: the repeat
					if !slices.Equal(got.losses, ref.losses) || !slices.Equal(got.norms, ref.norms) || !slices.Equal(got.w, ref.w) {
						t.Errorf("losses %v norms %v, without recomputation %v %v (weights equal: %v)",
							got.losses, got.norms, ref.losses, ref.norms, slices.Equal(got.w, ref.w))
					}
					want := plannedAct(t, j)
					for _, r := range got.sum.Ranks {
						if a := r.Peak[device.Act]; a != want {
							t.Errorf("rank %d: act peak %d bytes, the planner predicts %d", r.Rank, a, want)
						}
					}
				})
			}
		}
	}
}

// The default job (4 devices of 48 MiB) runs in bf16 within its budget
// now that the stash is 16-bit — under ZeRO-3 with flash and without, and
// under ZeRO-1, whose master weights are sharded — and the planner's
// prediction with the engine's store (what --dry-run and --parallel auto
// see) holds each rank's measured peak without comm within 5%, and the
// whole peak below the prediction + 5%.
func TestDefaultJobBF16Fits(t *testing.T) {
	if testing.Short() {
		t.Skip("trains the default model on 4 devices")
	}
	for _, p := range []string{"dp=4,zero=3,precision=bf16,flash=on", "dp=4,zero=3,precision=bf16", "dp=4,zero=1,precision=bf16,flash=on"} {
		j := DefaultJob()
		j.Parallel.Plan = p
		j.Train.Steps, j.Train.Warmup, j.Train.EvalBatches, j.Train.SampleEvery = 1, 0, 1, -1
		j.Data.CacheDir, j.Checkpoint.Dir = "off", ""
		sum, err := Run(context.Background(), Options{Job: j})
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		_, pr := predictedPeaks(t, j)
		budget, _ := device.ParseBytes(j.Parallel.DeviceMemory)
		ci := slices.Index(device.Tags(), device.Comm)
		for _, r := range sum.Ranks {
			if r.PeakAll > budget {
				t.Errorf("%s rank %d: peak %d bytes over the %d budget", p, r.Rank, r.PeakAll, budget)
			}
			// As TestPredictedMemoryMatchesMeasured: ZeRO's comm peak depends
			// on timing (its prediction is a bound), so the peak is held
			// within 5% without it, and the whole peak to the prediction + 5%.
			want := pr[r.Rank]
			if e := relErr(want.PeakAll-want.Peak[ci], r.PeakAll-r.Peak[device.Comm]); e > 0.05 || float64(r.PeakAll) > 1.05*float64(want.PeakAll) {
				t.Errorf("%s rank %d: predicted peak %d bytes (%d without comm), measured %d (%d)", p, r.Rank,
					want.PeakAll, want.PeakAll-want.Peak[ci], r.PeakAll, r.PeakAll-r.Peak[device.Comm])
			}
			t.Logf("%s rank %d: peak %.2f MiB (act %.2f MiB), predicted %.2f MiB", p, r.Rank, float64(r.PeakAll)/(1<<20), float64(r.Peak[device.Act])/(1<<20), float64(pr[r.Rank].PeakAll)/(1<<20))
		}
	}
}

// TestUnimplementedRefusedByName: plans the planner knows but the engine
// does not run yet (plan.EngineRefusals) are refused before anything is
// allocated, each naming its key.
func TestUnimplementedRefusedByName(t *testing.T) {
	for plan, want := range map[string]string{
		"dp=2,ep=2":              "ep=2 without routed experts",
		"pp=2,schedule=dualpipe": "schedule=dualpipe: the engine does not run the bidirectional DualPipe",
	} {
		_, err := tinyJob(plan).resolve()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error containing %q", plan, err, want)
		}
	}
}
