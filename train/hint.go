package train

import (
	"errors"
	"fmt"
	"runtime"

	"trellis/device"
	"trellis/internal/checked"
)

// oomHint adds to an out-of-memory error a plan that fits the budget: the
// fewest ZeRO-3 ranks N (a power of two, more than the plan has, dividing
// the global batch into micro-batches) for which the run's memory model
// (predictMemory: the planner's, with the engine's store) puts every
// rank's peak within the budget. It computes from formulas only: nothing
// is allocated, so the hint of a job far beyond the budget cannot itself
// run out of memory. The message stays on one line.
func oomHint(err error, j Job, s settings) error {
	if s.budget == 0 || !errors.Is(err, device.ErrOutOfMemory) {
		return err
	}
	p := s.enginePlan
	other := estimate(j.Model, j.Train.MicroBatch, p, s.threads).runner
	for n := 2; n <= 64; n *= 2 {
		per, ok := checked.Mul(int64(n), int64(j.Train.MicroBatch))
		if !ok || per == 0 || (p.ZeRO == 3 && n <= p.DP) || int64(j.Train.GlobalBatch)%per != 0 {
			continue
		}
		// A lower bound first: the model builds the layout and bucket
		// tables, which only a plausible candidate deserves.
		if stateBytes(j.Model.ParamCount(), 3, n, s.policy.Mixed())+other > float64(s.budget) {
			continue
		}
		need, ok := zero3Peak(j, s, n)
		if !ok {
			return err
		}
		if need <= s.budget {
			return fmt.Errorf("%w; with ZeRO-3 on %d devices it needs at most %s per device: try --parallel dp=%d,zero=3 --devices %d",
				err, n, device.FormatBytes(need), n, n)
		}
	}
	return fmt.Errorf("%w; no ZeRO-3 plan of up to 64 devices fits %s per device: shrink [model], lower train.micro_batch or raise --device-memory",
		err, device.FormatBytes(s.budget))
}

// zero3Peak is the most loaded rank's predicted peak for the job on n
// ZeRO-3 ranks (ok false: the model cannot describe it).
func zero3Peak(j Job, s settings, n int) (int64, bool) {
	c := s
	c.enginePlan.DP, c.enginePlan.TP, c.enginePlan.PP, c.enginePlan.ZeRO, c.enginePlan.SP = n, 1, 1, 3, false
	c.ranks, c.accum = n, j.Train.GlobalBatch/(n*j.Train.MicroBatch)
	if j.Train.Threads == 0 {
		c.threads = max(1, runtime.GOMAXPROCS(0)/n)
	}
	pr, err := j.predictMemory(c, hostCluster(c))
	if err != nil {
		return 0, false
	}
	var worst int64
	for _, r := range pr {
		worst = max(worst, r.PeakAll)
	}
	return worst, true
}
