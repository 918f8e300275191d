package train

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"

	"trellis/device"
	"trellis/metrics"
)

// memoryGrid is the plans whose predicted memory the tests hold to the
// measured: every parallelism the engine runs (dp, ZeRO 0-3, tp, sp, the
// four pipeline schedules, pp × dp, flash attention, bf16 with its 16-bit
// stash and recomputation).
var memoryGrid = []string{
	"dp=1", "dp=2,zero=0", "dp=2,zero=1", "dp=2,zero=2", "dp=2,zero=3", "dp=4,zero=1", "dp=4,zero=2", "dp=4,zero=3",
	"tp=2", "tp=2,sp=on", "dp=2,tp=2,zero=3", "dp=2,tp=2,sp=on,zero=1",
	"pp=2", "pp=2,schedule=gpipe", "pp=2,schedule=interleaved,vpp=2", "pp=2,schedule=zb-h1", "pp=4", "pp=2,dp=2,zero=1",
	"dp=1,flash=on", "dp=2,zero=3,flash=on", "tp=2,flash=on", "pp=2,flash=on",
	"precision=bf16,recompute=selective", "dp=2,zero=1,precision=bf16,recompute=full", "dp=2,zero=3,precision=bf16,flash=on",
	"cp=2,flash=on", "dp=2,cp=2,zero=1,flash=on",
}

// Every rank's predicted peak (the planner's memory model with the
// engine's store, predictMemory) is within 5% of the peak the device
// measured, on every plan of the grid; so is every tag above 4 KiB,
// ZeRO's comm included (a pipeline's is not held, see below) — the
// prediction is right for the right reasons, not by compensating errors.
func TestPredictedMemoryMatchesMeasured(t *testing.T) {
	if len(memoryGrid) < 20 {
		t.Fatalf("the grid has %d plans, want at least 20", len(memoryGrid))
	}
	for _, p := range memoryGrid {
		t.Run(p, func(t *testing.T) {
			j := tinyJob(p)
			j.Model.Layers = 4
			holdPredicted(t, j)
		})
	}
}

// holdPredicted runs j for one step and holds every rank's measured peak
// to the prediction (TestPredictedMemoryMatchesMeasured's rules).
func holdPredicted(t *testing.T, j Job) {
	t.Helper()
	holdPredictedBias(t, j, nil)
}

// holdPredictedBias is holdPredicted for a run whose MoE blocks' expert
// biases start at bias (runJobBias).
func holdPredictedBias(t *testing.T, j Job, bias map[int][]float32) {
	t.Helper()
	j.Train.Steps = 1
	got := runJobBias(t, j, "", "", 0, bias)
	s, pr := predictedPeaks(t, j)
	ci := slices.Index(device.Tags(), device.Comm)
	worst := 0.0
	defer func() { t.Logf("worst error, peak or tag above 4 KiB: %.2f%%", 100*worst) }()
	for _, r := range got.sum.Ranks {
		want := pr[r.Rank]
		ep, _ := s.enginePlan.Experts()
		switch {
		case ep > 1:
			// Expert parallelism's comm tag is held to its bound (below,
			// the sum of its two state instances', whose buffers come and
			// go at different points of the schedule), and so is the
			// whole peak: its tags need not peak together (under ZeRO-3
			// the MoE units' copies in the forward, their gradients in
			// the backward); every other tag within 5%.
			if r.PeakAll > want.PeakAll || r.Peak[device.Comm] > want.Peak[ci] {
				t.Errorf("rank %d: predicted peak %d bytes (%d comm), measured %d (%d comm)", r.Rank, want.PeakAll, want.Peak[ci], r.PeakAll, r.Peak[device.Comm])
			}
		case s.enginePlan.PP > 1 || s.enginePlan.CP > 1:
			// A pipeline's comm tag (and the ring's, under cp) is held
			// to its bound (below) and the rest of the peak within 5%.
			if e := relErr(want.PeakAll-want.Peak[ci], r.PeakAll-r.Peak[device.Comm]); e > 0.05 || r.Peak[device.Comm] > want.Peak[ci] {
				t.Errorf("rank %d: predicted peak %d bytes (%d comm), measured %d (%d comm)", r.Rank, want.PeakAll, want.Peak[ci], r.PeakAll, r.Peak[device.Comm])
			}
		default:
			e := relErr(want.PeakAll, r.PeakAll)
			worst = max(worst, e)
			if e > 0.05 {
				t.Errorf("rank %d: predicted peak %d bytes, measured %d (%.1f%%)", r.Rank, want.PeakAll, r.PeakAll, 100*e)
			}
		}
		for i, tg := range device.Tags() {
			m := r.Peak[tg]
			if tg == device.Comm && (s.enginePlan.PP > 1 || s.enginePlan.CP > 1 || ep > 1) {
				// A pipeline's comm (boundary messages, charged while
				// they wait, and with ZeRO-2/3 the buckets its schedule
				// interleaves) and the ring's (its early messages) are
				// held to their bound above: the messages depend on timing. ZeRO's staging buffers
				// without a pipeline, reaped at fixed points of the
				// schedule, are held here.
				continue
			}
			if max(m, want.Peak[i]) > 4<<10 {
				worst = max(worst, relErr(want.Peak[i], m))
			}
			if max(m, want.Peak[i]) > 4<<10 && relErr(want.Peak[i], m) > 0.05 {
				t.Errorf("rank %d %s: predicted %d bytes, measured %d", r.Rank, tg, want.Peak[i], m)
			}
		}
	}
}

// predictedPeaks is j's settings and every rank's predicted peaks on the
// built-in cluster (what --dry-run and --parallel auto see).
func predictedPeaks(t *testing.T, j Job) (settings, []Predicted) {
	t.Helper()
	s, err := j.resolve()
	if err != nil {
		t.Fatal(err)
	}
	pr, err := j.predictMemory(s, hostCluster(s))
	if err != nil {
		t.Fatal(err)
	}
	return s, pr
}

// relErr is |pred − meas| / meas (pred ≠ 0 against 0 measured: +Inf).
func relErr(pred, meas int64) float64 {
	if meas == 0 {
		if pred == 0 {
			return 0
		}
		return math.Inf(1)
	}
	return math.Abs(float64(pred-meas)) / float64(meas)
}

// --parallel auto on the default job's 4 devices of 48 MiB picks a plan
// the engine accepts, predicted within the budget, says why (the choice,
// the runner-up) and that one device does not fit.
func TestChoosePlanDefaultJob(t *testing.T) {
	j := DefaultJob()
	j.Parallel.Plan, j.Parallel.Devices = Auto, 4
	ch, err := j.ChoosePlan()
	if err != nil {
		t.Fatal(err)
	}
	if ch.Devices != 4 || len(ch.Why) != 3 || !strings.Contains(ch.Why[2], "dp=1 does not fit") || !strings.HasPrefix(ch.Why[1], "runner-up") {
		t.Fatalf("choice %+v", ch)
	}
	c := j.withPlan(ch.Plan, ch.Devices)
	s, err := c.resolve()
	if err != nil {
		t.Fatalf("the engine refuses the planner's choice %s: %v", ch.Plan, err)
	}
	pr, err := c.predictMemory(s, hostCluster(s))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range pr {
		if r.PeakAll > s.budget {
			t.Errorf("%s rank %d: predicted %d bytes over the budget %d", ch.Plan, r.Rank, r.PeakAll, s.budget)
		}
	}
}

// --dry-run prints every rank's predicted peaks and the step's split, and
// flags a rank over the budget.
func TestDryRun(t *testing.T) {
	j := DefaultJob()
	j.Parallel.Plan = "dp=2,zero=1"
	var b strings.Builder
	if err := j.DryRun(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"built-in estimate", "\n     0 ", "\n     1 ", "step ", "exposed comm", "over the 48.0 MiB budget"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run output lacks %q:\n%s", want, out)
		}
	}
}

// Every --metrics line carries the predicted step time and every rank its
// predicted peaks, equal to the end-of-run prediction; the summary table
// prints predicted against measured.
func TestMetricsCarryPrediction(t *testing.T) {
	j := tinyJob("dp=2,zero=3")
	j.Train.Steps = 2
	var metrics, out bytes.Buffer
	sum, err := Run(context.Background(), Options{Job: j, Metrics: &metrics, Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	lines := 0
	for _, l := range strings.Split(strings.TrimSpace(metrics.String()), "\n") {
		var m metricsLine
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		lines++
		if !(m.PredStepS > 0) || len(m.Ranks) != 2 {
			t.Fatalf("line %s", l)
		}
		for _, r := range m.Ranks {
			if r.Predicted == nil || r.Predicted.Peak != sum.Prediction.Ranks[r.Rank].PeakAll || r.Predicted.Param == 0 {
				t.Errorf("step %d rank %d: predicted %+v", m.Step, r.Rank, r.Predicted)
			}
		}
	}
	if lines != 2 {
		t.Errorf("%d metrics lines", lines)
	}
	if s := out.String(); !strings.Contains(s, "predicted vs measured") || !strings.Contains(s, "exposed comm") {
		t.Errorf("summary lacks the prediction table:\n%s", s)
	}
}

// metrics.TagNames (the --metrics schema, a layer below device) and
// tagsOf name and fill the tags in device's order: each tag's peak lands
// in the field of its own name.
func TestMetricsTagsAreDevices(t *testing.T) {
	names := metrics.TagNames()
	if len(names) != len(device.Tags()) {
		t.Fatalf("metrics tags %v, device tags %v", names, device.Tags())
	}
	var peak [device.NumTags]int64
	for i, tag := range device.Tags() {
		if names[i] != tag.String() {
			t.Errorf("metrics tag %d is %q, device's %q", i, names[i], tag)
		}
		peak[tag] = int64(i + 1)
	}
	got := tagsOf(peak, 99)
	for i, tag := range device.Tags() {
		if v := got.Tag(tag.String()); v != int64(i+1) {
			t.Errorf("tagsOf: %s = %d, want %d", tag, v, i+1)
		}
	}
	if got.Peak != 99 {
		t.Errorf("tagsOf: peak %d, want 99", got.Peak)
	}
}
