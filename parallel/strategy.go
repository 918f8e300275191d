// Package parallel names what every parallel strategy provides to the
// training loop; its subpackages implement it.
package parallel

import (
	"trellis/checkpoint"
	"trellis/model"
)

// Strategy owns one rank's parameters, gradients and optimizer state under a
// plan, and is the model.Params its forward and backward passes run on.
// parallel/single (one device: the reference every plan must match),
// parallel/dp (data parallelism) and parallel/zero (ZeRO stages 1–3)
// implement it; those that communicate also have CommStats() comm.Stats,
// which the run reports.
//
// A step is: BeginStep; for each micro-batch k of accum: BeginMicro(k,
// accum), forward, backward; FinishGrads; Update.
type Strategy interface {
	model.Params
	// Init writes the initial weights for seed (only the elements this rank
	// holds; every plan gets the same global weights).
	Init(seed uint64) error
	// BeginStep zeroes the gradients for a new optimizer step.
	BeginStep() error
	// BeginMicro announces that the next backward pass is micro-batch k of
	// accum (gradients are reduced only after the last).
	BeginMicro(k, accum int)
	// FinishGrads waits until the step's gradients are reduced.
	FinishGrads() error
	// Update clips the gradients to global norm maxNorm (0: no clipping),
	// applies AdamW with learning rate lr and returns the global gradient
	// norm before clipping.
	Update(lr, maxNorm float64) (float64, error)
	// Shards is this rank's part of the training state, for a checkpoint:
	// parameters under their names, Adam moments under "optim.m."/"optim.v."
	// plus the name. Replicated state is written by one rank only.
	Shards() ([]checkpoint.Shard, error)
	// Restore loads this rank's part of a checkpoint saved under any plan
	// (the global elements its layout holds, by tensor name: flat.Read),
	// and the optimizer step count.
	Restore(c *checkpoint.Checkpoint, optSteps int) error
	// OptimizerSteps is the number of updates applied so far.
	OptimizerSteps() int
	// Free returns the memory to the device.
	Free()
}
