package train

import (
	"context"
	"errors"
	"fmt"
	"math"

	"trellis/checkpoint"
	"trellis/comm"
)

// Interrupted is the error of a run whose context was cancelled (Ctrl-C,
// SIGTERM): every rank stops at the same step boundary, checkpointing
// first when checkpoint.dir is set.
type Interrupted struct {
	Step       int    // steps completed
	Checkpoint string // the checkpoint written on the way out ("" if none)
}

func (e *Interrupted) Error() string {
	if e.Checkpoint == "" {
		return fmt.Sprintf("interrupted after step %d; nothing saved (checkpoint.dir is empty)", e.Step)
	}
	return fmt.Sprintf("interrupted after step %d; checkpoint %s", e.Step, e.Checkpoint)
}

// Unwrap makes errors.Is(err, context.Canceled) hold.
func (e *Interrupted) Unwrap() error { return context.Canceled }

func (*Interrupted) wholeRun() {}

// Diverged is the error of a step whose loss or gradient norm is not
// finite. The step's update is not saved: the last good checkpoint and the
// metrics up to the previous step stay as they were.
type Diverged struct {
	Step           int     // the step that diverged (1-based)
	Loss, GradNorm float64 // as computed (at least one is NaN or ±Inf)
	LR             float64 // the step's learning rate
	LastGood       string  // the newest checkpoint of the run ("" if none)
}

func (e *Diverged) Error() string {
	last := "no checkpoint was written"
	if e.LastGood != "" {
		last = "the last good checkpoint is " + e.LastGood
	}
	return fmt.Sprintf("step %d: loss %g, gradient norm %g (lr %g): training diverged and stopped before saving this step; %s",
		e.Step, e.Loss, e.GradNorm, e.LR, last)
}

func (*Diverged) wholeRun() {}

// isWholeRun reports whether err is one every rank returns together (so it
// is reported once, without a rank number).
func isWholeRun(err error) bool {
	var w interface{ wholeRun() }
	return errors.As(err, &w)
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// claimAgreed runs claimDir on rank 0 of a process world (and the
// writability check on the others) and lets every rank learn the outcome,
// so that a refusal stops the whole job before step 1 instead of leaving
// the other ranks to time out. Rank 0, which commits every checkpoint,
// holds the directory's lock (nil on the other ranks).
func claimAgreed(o Options, res *resumeState) (id string, _ *checkpoint.Lock, err error) {
	var lock *checkpoint.Lock
	defer func() {
		if err != nil {
			lock.Release()
		}
	}()
	switch {
	case o.World.Rank() == 0:
		id, lock, err = claimDir(o.Job, res)
	case o.Job.Checkpoint.Dir != "":
		// Every rank writes its own file there (on its own node).
		if err = checkpoint.CheckWritable(o.Job.Checkpoint.Dir); err != nil {
			err = fmt.Errorf("rank %d: %w", o.World.Rank(), err)
		}
	}
	flag := []float32{0}
	if err != nil {
		flag[0] = 1
	}
	if o.World.Size() > 1 {
		if aerr := comm.AllReduce(o.World, comm.F32(flag), comm.Max); aerr != nil {
			return "", nil, errors.Join(err, aerr)
		}
	}
	switch {
	case err != nil:
		return "", nil, err
	case flag[0] != 0:
		return "", nil, errors.New("train: checkpoint.dir was refused on another rank (its output says why)")
	}
	return id, lock, nil
}

// stopRequested reports whether Options.Stop has been closed.
func (r *rank) stopRequested() bool {
	select {
	case <-r.stopc:
		return true
	default:
		return false
	}
}
