package train

import (
	"errors"
	"fmt"

	"trellis/device"
	"trellis/model"
	"trellis/ops"
	"trellis/parallel/zero"
)

// oomHint adds to an out-of-memory error a plan that fits the budget: the
// fewest ZeRO-3 ranks N (a power of two, more than the plan has, dividing
// the global batch into micro-batches) for which one rank's accounting —
// the sharded state and communication buffers of zero.Shape.Memory plus
// the activations and scratch of a micro-batch, measured on a scratch
// device — is within the budget. The message stays on one line.
func oomHint(err error, j Job, s settings) error {
	if s.budget == 0 || !errors.Is(err, device.ErrOutOfMemory) {
		return err
	}
	other, perr := microBatchBytes(j)
	if perr != nil {
		return err
	}
	p := s.enginePlan
	for n := 2; n <= 64; n *= 2 {
		if (p.ZeRO == 3 && n <= p.DP) || j.Train.GlobalBatch%(n*j.Train.MicroBatch) != 0 {
			continue
		}
		m, merr := zero.Shape{Model: j.Model, Stage: 3, Ranks: n, BucketElems: int(s.bucket / 4), Overlap: j.Parallel.Overlap}.Memory()
		if merr != nil {
			return err
		}
		if need := m.State() + m.Comm + other; need <= s.budget {
			return fmt.Errorf("%w; with ZeRO-3 on %d devices it needs at most %s per device: try --parallel dp=%d,zero=3 --devices %d",
				err, n, device.FormatBytes(need), n, n)
		}
	}
	return fmt.Errorf("%w; no ZeRO-3 plan of up to 64 devices fits %s per device: lower train.micro_batch or raise --device-memory",
		err, device.FormatBytes(s.budget))
}

// microBatchBytes measures what a rank allocates besides the training
// state: the model's backward scratch, one micro-batch's activations and
// its token buffers.
func microBatchBytes(j Job) (int64, error) {
	dev := device.New(device.Config{})
	k, err := ops.New(ops.Config{Threads: 1})
	if err != nil {
		return 0, err
	}
	p, err := j.EnginePlan()
	if err != nil {
		return 0, err
	}
	gpt, err := model.New(model.Options{Model: j.Model, Kernels: k, Device: dev, MicroBatch: j.Train.MicroBatch, Flash: p.Flash})
	if err != nil {
		return 0, err
	}
	defer gpt.Free()
	st, err := gpt.NewStash()
	if err != nil {
		return 0, err
	}
	defer st.Free()
	return dev.Stats().LiveTotal + int64(2*j.Train.MicroBatch*j.Model.SeqLen*4), nil
}
