package train

import (
	"errors"
	"fmt"

	"trellis/device"
	"trellis/internal/checked"
	"trellis/parallel/zero"
)

// oomHint adds to an out-of-memory error a plan that fits the budget: the
// fewest ZeRO-3 ranks N (a power of two, more than the plan has, dividing
// the global batch into micro-batches) for which one rank's accounting —
// the sharded state and communication buffers of zero.Shape.Memory plus
// the runner's scratch, one micro-batch's activations and its token
// buffers (model.Config.RunnerBytes + 8·B·T) — is within the budget. It
// computes from formulas only: nothing is allocated, so the hint of a job
// far beyond the budget cannot itself run out of memory. The message stays
// on one line.
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
		// A lower bound first: Shape.Memory builds the layout and bucket
		// tables, which only a plausible candidate deserves.
		if stateBytes(j.Model.ParamCount(), 3, n)+other > float64(s.budget) {
			continue
		}
		m, merr := zero.Shape{Model: j.Model, Stage: 3, Ranks: n, BucketElems: int(s.bucket / 4), Overlap: j.Parallel.Overlap}.Memory()
		if merr != nil {
			return err
		}
		if need := float64(m.State()+m.Comm) + other; need <= float64(s.budget) {
			return fmt.Errorf("%w; with ZeRO-3 on %d devices it needs at most %s per device: try --parallel dp=%d,zero=3 --devices %d",
				err, n, device.FormatBytes(int64(need)), n, n)
		}
	}
	return fmt.Errorf("%w; no ZeRO-3 plan of up to 64 devices fits %s per device: shrink [model], lower train.micro_batch or raise --device-memory",
		err, device.FormatBytes(s.budget))
}
