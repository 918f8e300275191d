// Package parallel names what the rank's state strategy provides to the
// step loop; parallel/zero implements it (data parallelism and ZeRO 0–3
// over one reduction group, for any part of the model a rank holds),
// parallel/tp gives the model its tensor-parallel group, parallel/pp runs
// a rank's pipeline schedule (a run without a pipeline is a pipeline of
// one stage).
package parallel

import (
	"trellis/checkpoint"
	"trellis/comm"
	"trellis/model"
)

// Strategy owns one rank's parameters, gradients and optimizer state
// under a plan, and is the model.Params its passes run on: it hands each
// unit's weights out in the precision policy's Param dtype and takes the
// fp32 gradients.
//
// A step is: BeginStep(accum); accum micro-batches' forward and backward
// passes (in the order a pipeline schedule gives); FinishGrads; Update.
type Strategy interface {
	model.Params
	// Init writes the initial weights (only the elements this rank holds;
	// every plan gets the same global weights).
	Init(in model.Init) error
	// BeginStep zeroes the gradients for a step of accum micro-batches.
	BeginStep(accum int) error
	// FinishGrads waits until the step's gradients are reduced.
	FinishGrads() error
	// Update clips the gradients to the global norm u.Clip (0: no
	// clipping) and applies AdamW with learning rate u.LR; under loss
	// scaling (u.InvScale = 1/S, the gradients hold S·g) a step whose
	// gradients overflowed on any rank is skipped everywhere. It returns
	// the global gradient norm before clipping (of g, not S·g).
	Update(u Update) (Updated, error)
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
	// CommStats is the rank's communication: Busy the total time its
	// collectives ran, Wait the part the rank was blocked on.
	CommStats() comm.Stats
	// StageStats is the part of CommStats's waits that the sums over a
	// pipeline's stages after the schedule blocked (a tied embedding's
	// gradient between the first and last stages, the gradient norm's
	// partial; zero without a pipeline): their Skew, the wait for other
	// stages that left the cores idle, is the pipeline's drain.
	StageStats() comm.Stats
	// Free returns the memory to the device.
	Free()
}

// Update is one optimizer step's arguments.
type Update struct {
	LR, Clip float64
	InvScale float64 // 1/S under loss scaling; 0: none
}

// Updated is what a step did.
type Updated struct {
	Norm    float64 // the global gradient norm before clipping
	Skipped bool    // loss scaling: the gradients overflowed, nothing changed
}
