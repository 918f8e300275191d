package train

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
)

// Issue 29: train.loss_scale up to 1e308 was accepted (every step then
// skipped while the scale halved), and the summary never said steps were
// skipped. The scale is bounded, and the summary counts the skipped steps.
func TestFP16LossScaleBoundsAndSummary(t *testing.T) {
	for _, c := range []struct {
		scale float64
		want  string
	}{{1e308, "train.loss_scale=1e+308 must be in [1, 2^40]"}, {0x1p41, "must be in [1, 2^40]"}, {0.5, "must be in [1, 2^40]"}} {
		j := tinyJob("precision=fp16")
		j.Train.LossScale = c.scale
		if _, err := Run(context.Background(), Options{Job: j}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("loss_scale=%g: %v, want %q", c.scale, err, c.want)
		}
	}
	j := tinyJob("precision=fp16")
	j.Train.LossScale, j.Train.LossScaleWindow, j.Train.Steps = 0x1p40, 2, 12
	j.Train.LossScaleWindow = -1
	if _, err := Run(context.Background(), Options{Job: j}); err == nil || !strings.Contains(err.Error(), "train.loss_scale_window=-1 must be >= 0") {
		t.Errorf("loss_scale_window=-1: %v", err)
	}
	j.Train.LossScaleWindow = 2
	var out bytes.Buffer
	sum, err := Run(context.Background(), Options{Job: j, Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if sum.SkippedSteps == 0 {
		t.Fatalf("no step skipped at scale 2^40")
	}
	if want := "fp16: " + strconv.Itoa(sum.SkippedSteps) + " of 12 steps skipped"; !strings.Contains(out.String(), want) {
		t.Errorf("the summary does not say %q:\n%s", want, out.String())
	}
}

// Issue 29: --until -1 was accepted silently (and ran to train.steps).
func TestUntilNegativeRefused(t *testing.T) {
	j := tinyJob("")
	_, err := Run(context.Background(), Options{Job: j, Until: -1})
	if err == nil || !strings.Contains(err.Error(), "--until=-1 must be >= 0") {
		t.Errorf("--until -1: %v", err)
	}
}

// Issue 29: --parallel auto said "raise the budget" when no budget was set
// and the real cause was the job's shape.
func TestAutoNamesTheShapeNotTheBudget(t *testing.T) {
	j := DefaultJob()
	j.Parallel.Plan, j.Parallel.DeviceMemory = Auto, ""
	j.Train.GlobalBatch = 7 // no dp × micro_batch=2 divides it
	j.Data.CacheDir = "off"
	_, err := j.ChoosePlan()
	if err == nil || strings.Contains(err.Error(), "budget") || !(strings.Contains(err.Error(), "batch: dp·mbs does not divide the global batch") ||
		strings.Contains(err.Error(), "train.global_batch=7 is not a multiple of train.micro_batch=2")) { // issue 28 names the rule with its numbers
		t.Errorf("no budget, global_batch=7: %v", err)
	}
	j.Parallel.DeviceMemory = "2MiB"
	j.Train.GlobalBatch = 16
	if _, err := j.ChoosePlan(); err == nil || !strings.Contains(err.Error(), "raise the budget") {
		t.Errorf("a 2 MiB budget: %v", err)
	}
}
