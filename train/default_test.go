package train

import (
	"context"
	"errors"
	"strings"
	"testing"

	"trellis/device"
)

// The seed's demonstration, on the default job: one device of the default
// budget fails before its first step with the out-of-memory error naming
// the tag that overflows and a hint; the default plan, ZeRO-3 on 4 local
// devices, trains within the same budget.
func TestDefaultJobNeedsZeRO3(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates the default model on 5 devices")
	}
	j := DefaultJob()
	j.Train.Steps, j.Train.Warmup, j.Train.EvalBatches, j.Train.SampleEvery = 1, 0, 1, -1
	j.Data.CacheDir, j.Checkpoint.Dir = "off", ""
	if j.Parallel.Plan != "dp=4,zero=3" {
		t.Fatalf("the default plan is %q", j.Parallel.Plan)
	}

	single := j
	single.Parallel.Plan = "dp=1"
	_, err := Run(context.Background(), Options{Job: single})
	if !errors.Is(err, device.ErrOutOfMemory) {
		t.Fatalf("one device: error %v, want out of memory", err)
	}
	for _, want := range []string{"(optim)", "48.0 MiB", "try --parallel dp=4,zero=3 --devices 4"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("one device: error %q does not mention %q", err, want)
		}
	}

	sum, err := Run(context.Background(), Options{Job: j})
	if err != nil {
		t.Fatalf("ZeRO-3 on 4 devices: %v", err)
	}
	budget, _ := device.ParseBytes(j.Parallel.DeviceMemory)
	psi := int64(j.Model.NumParams())
	for _, r := range sum.Ranks {
		state := r.Peak[device.Param] + r.Peak[device.Grad] + r.Peak[device.Optim]
		if r.PeakAll > budget || 10*state > 3*16*psi {
			t.Errorf("rank %d: peak %d bytes (budget %d), state %d bytes (ZeRO-0: %d)", r.Rank, r.PeakAll, budget, state, 16*psi)
		}
	}
}
