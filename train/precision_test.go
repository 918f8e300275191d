package train

import (
	"math"
	"strings"
	"testing"

	"trellis/device"
	"trellis/model"
)

// TestBF16TracksFP32 trains the tiny model 30 steps in fp32 and in bf16:
// every bf16 loss within 3% of fp32's and the last within 1%, and the bf16
// run not the fp32 one (the bf16 GEMMs ran).
func TestBF16TracksFP32(t *testing.T) {
	j := tinyJob("")
	j.Train.Steps, j.Train.Warmup = 30, 3
	fp32 := runJob(t, j, "", "", 0)
	j.Parallel.Plan = "precision=bf16"
	bf16 := runJob(t, j, "", "", 0)
	if len(bf16.losses) != 30 || len(fp32.losses) != 30 {
		t.Fatalf("%d and %d steps logged, want 30", len(bf16.losses), len(fp32.losses))
	}
	same := true
	for i, want := range fp32.losses {
		got := bf16.losses[i]
		same = same && got == want
		if d := math.Abs(got-want) / want; d > 0.03 {
			t.Errorf("step %d: bf16 loss %.5g, fp32 %.5g (rel diff %.3g > 0.03)", i+1, got, want, d)
		}
	}
	last, ref := bf16.losses[29], fp32.losses[29]
	if d := math.Abs(last-ref) / ref; d > 0.01 {
		t.Errorf("last loss: bf16 %.5g, fp32 %.5g (rel diff %.3g > 0.01)", last, ref, d)
	}
	if same {
		t.Error("bf16 losses equal fp32's bit for bit: the bf16 path did not run")
	}
	t.Logf("step 30: fp32 %.5f bf16 %.5f", ref, last)
}

// TestBF16Plans runs bf16 under data parallelism and ZeRO 1-3 against the
// single-device bf16 run (within 1e-3 relative over 5 steps: the fp32
// reduction order differs, and a master weight that differs in its last
// bits may round to a neighbouring bf16), twice for bit-identity, and
// holds each rank's state to the formula: bf16 weights 2 B/param (param),
// fp32 master 4 + Adam moments 8 (optim) and fp32 gradients 4 (grad),
// each sharded as the ZeRO stage says; under ZeRO-3 the bf16 copy exists
// for the unit being computed only.
func TestBF16Plans(t *testing.T) {
	ref := runJob(t, tinyJob("precision=bf16"), "", "", 0)
	P := float64(tinyJob("").Model.ParamCount())
	for _, tc := range []struct {
		plan               string
		param, grad, optim float64 // bytes per parameter on each rank
	}{
		{"precision=bf16", 2, 4, 12},
		{"dp=2,precision=bf16", 2, 4, 12},
		{"dp=2,zero=1,precision=bf16", 2, 4, 4 + 8.0/2},
		{"dp=2,zero=2,precision=bf16", 2, 4.0 / 2, 4 + 8.0/2},
		{"dp=2,zero=3,precision=bf16", 0, 4.0 / 2, 12.0 / 2}, // param: see below
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
		}
		for r, rs := range a.sum.Ranks {
			for _, w := range []struct {
				tag  device.Tag
				perP float64
			}{{device.Param, tc.param}, {device.Grad, tc.grad}, {device.Optim, tc.optim}} {
				got, want := float64(rs.Peak[w.tag]), w.perP*P
				if w.tag == device.Param && w.perP == 0 {
					// ZeRO-3: the bf16 copy of one unit at a time, as it is gathered.
					want = 2 * float64(maxUnit(tinyJob("").Model))
				}
				// ZeRO pads its flat buffers to whole chunks: allow 2%.
				if math.Abs(got-want) > 0.02*want {
					t.Errorf("%s rank %d: %s peak %.0f B, want %.3g·Ψ = %.0f B", tc.plan, r, w.tag, got, w.perP, want)
				}
			}
		}
	}
}

// TestBF16Refused: bf16 with tp or pp, and fp16, are refused by name.
func TestBF16Refused(t *testing.T) {
	for plan, want := range map[string]string{
		"tp=2,precision=bf16": "precision=bf16 with tp=2",
		"pp=2,precision=bf16": "precision=bf16 with pp=2",
		"precision=fp16":      "precision=fp16",
	} {
		_, err := tinyJob(plan).resolve()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error naming %q", plan, err, want)
		}
	}
}

// TestBF16Planned: under bf16 the engine keeps its stash in fp32, so the
// act peak is the fp32 formula's, and the planner predicts it (engine_stash)
// and the state tags (the engine's bf16 formula of docs/ARCHITECTURE.md,
// "Mixed precision", which a CPU host cluster file gets) within 2%.
func TestBF16Planned(t *testing.T) {
	for _, plan := range []string{"precision=bf16", "dp=2,precision=bf16", "dp=2,zero=1,precision=bf16",
		"dp=2,zero=2,precision=bf16", "dp=2,zero=3,precision=bf16"} {
		j := tinyJob(plan)
		j.Train.Steps = 1
		got := runJob(t, j, "", "", 0)
		want := actFormula(j, 1, false)
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
			}{{device.Param, pm.Param}, {device.Grad, pm.Grad}, {device.Optim, pm.Optim}} {
				if m := r.Peak[w.tag]; math.Abs(float64(m-w.pred)) > 0.02*float64(w.pred) {
					t.Errorf("%s rank %d: %s peak %d bytes, the planner predicts %d", plan, r.Rank, w.tag, m, w.pred)
				}
			}
		}
	}
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
// the bf16 copy is rounded from them), alone and under ZeRO-3.
func TestBF16Resume(t *testing.T) {
	for _, plan := range []string{"precision=bf16", "dp=2,zero=3,precision=bf16"} {
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
