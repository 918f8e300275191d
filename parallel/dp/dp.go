// Package dp is data parallelism: every rank of a group holds the whole
// model, its gradients and its optimizer state, runs its own share of the
// global batch, and averages the gradients before an identical update.
//
// Gradients are averaged in buckets (parallel/flat): consecutive units
// grouped up to a size, from the last unit down, so buckets fill in the
// order the backward pass finishes units. With overlap, a bucket's
// all-reduce
//
//	g_b ← (1/N) Σ_ranks g_b
//
// is issued the moment its last unit's gradient is final (model.Params'
// GradsDone) during the LAST micro-batch of a step, and runs on the group's
// queue while the backward pass continues; FinishGrads waits for the rest.
// Earlier micro-batches only accumulate, so gradient accumulation reduces
// once per step. Without overlap every bucket is reduced after the
// backward pass. The time the rank blocks in those waits is its exposed
// communication (CommStats().Wait); CommStats().Busy is the total.
//
// Memory per rank (fp32, Ψ parameters): param 4Ψ, grad 4Ψ, optim 8Ψ — the
// 16Ψ of ZeRO stage 0 — and no communication buffers (the all-reduce works
// in place).
package dp

import (
	"errors"
	"fmt"

	"trellis/checkpoint"
	"trellis/comm"
	"trellis/device"
	"trellis/model"
	"trellis/ops"
	"trellis/optim"
	"trellis/parallel/flat"
	"trellis/parallel/single"
)

// Config is everything New needs.
type Config struct {
	Model model.Config
	// Group is the data-parallel group the gradients are averaged over (a
	// group of its own, so that gradient traffic has its own queue). The
	// strategy does not close it.
	Group   comm.Group
	Device  *device.Device // param, grad and optim are charged here
	Kernels *ops.Kernels   // the optimizer's threads
	Hyper   optim.Hyper
	Decay   []optim.Range // global ranges that get weight decay (optim.Decay2D)
	// BucketElems caps a gradient bucket, in elements; 0: one unit per bucket.
	BucketElems int
	// Overlap reduces each bucket as soon as it is ready; false reduces
	// after the backward pass.
	Overlap bool
	// Part and ReduceNorm are single's: the rank's piece of the model
	// under tensor parallelism, and the norm's reduction over its group.
	Part       model.Part
	ReduceNorm func(sq float64) (float64, error)
}

// Validate names the first field that breaks its rule.
func (c Config) Validate() error {
	if err := c.Model.Validate(); err != nil {
		return err
	}
	switch {
	case c.Group == nil:
		return errors.New("dp: Config.Group is nil")
	case c.Device == nil:
		return errors.New("dp: Config.Device is nil")
	case c.BucketElems < 0:
		return fmt.Errorf("dp: BucketElems=%d must be >= 0", c.BucketElems)
	}
	return nil
}

// Strategy is one rank's data-parallel state; it is the model.Params its
// forward and backward passes run on.
type Strategy struct {
	*single.Strategy // the whole state, as on one device
	cfg              Config
	bl               *flat.Layout
	track            flat.Tracker
	last             bool          // the current micro-batch is the step's last
	left             []int         // per bucket: units whose gradients are not final yet
	ops              []*flat.Op    // per bucket: its all-reduce this step (nil: not issued)
	buckets          []flat.Bucket // = bl.Buckets
}

// New allocates the full parameters, gradients and optimizer state.
func New(cfg Config) (*Strategy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	lay := cfg.Model.PartLayout(cfg.Part)
	sizes := make([]int, len(lay.Units))
	for i, u := range lay.Units {
		sizes[i] = u.Size
	}
	bl, err := flat.New(flat.Config{UnitSizes: sizes, MaxElems: cfg.BucketElems, Ranks: 1})
	if err != nil {
		return nil, fmt.Errorf("dp: %w", err)
	}
	st, err := single.New(single.Config{Model: cfg.Model, Device: cfg.Device, Kernels: cfg.Kernels, Hyper: cfg.Hyper, Decay: cfg.Decay,
		Part: cfg.Part, ReduceNorm: cfg.ReduceNorm})
	if err != nil {
		return nil, err
	}
	s := &Strategy{Strategy: st, cfg: cfg, bl: bl, buckets: bl.Buckets,
		left: make([]int, len(bl.Buckets)), ops: make([]*flat.Op, len(bl.Buckets)), last: true}
	s.BeginMicro(0, 1)
	return s, nil
}

// BeginStep zeroes the gradients.
func (s *Strategy) BeginStep() error {
	clear(s.ops)
	return s.Strategy.BeginStep()
}

// BeginMicro records whether micro-batch k is the step's last (the only
// one whose backward pass reduces).
func (s *Strategy) BeginMicro(k, accum int) {
	s.last = k == accum-1
	for i, b := range s.buckets {
		s.left[i] = b.Last - b.First + 1
	}
}

// GradsDone issues the all-reduce of unit u's bucket when u was the
// bucket's last unmet unit of the step's last micro-batch (with overlap).
func (s *Strategy) GradsDone(u int) error {
	if err := s.bl.CheckUnit(u); err != nil {
		return fmt.Errorf("dp: %w", err)
	}
	if !s.last {
		return nil
	}
	b := s.bl.Of(u)
	s.left[b]--
	if s.left[b] == 0 && s.cfg.Overlap {
		s.reduce(b)
	}
	return nil
}

// reduce issues bucket b's all-reduce (average) in place.
func (s *Strategy) reduce(b int) {
	bk := s.buckets[b]
	w := s.cfg.Group.AllReduce(comm.F32(s.G[bk.Offset:bk.Offset+bk.Len]), comm.Avg)
	s.ops[b] = s.track.Watch(w, nil)
}

// FinishGrads issues the buckets not yet reduced, from the last down, and
// waits for every bucket's all-reduce.
func (s *Strategy) FinishGrads() error {
	for b := len(s.buckets) - 1; b >= 0; b-- {
		if s.ops[b] == nil {
			s.reduce(b)
		}
	}
	var first error
	for b, op := range s.ops {
		if err := op.Wait(); err != nil && first == nil {
			first = fmt.Errorf("dp: gradient all-reduce of bucket %d: %w", b, err)
		}
		s.ops[b] = nil
	}
	return first
}

// Update is single's: every rank holds the same averaged gradients, so
// every rank computes the same global norm and the same update.

// Shards is the whole state, written by group rank 0 only (the other
// ranks hold identical copies).
func (s *Strategy) Shards() ([]checkpoint.Shard, error) {
	if s.cfg.Group.Rank() != 0 {
		return []checkpoint.Shard{}, nil
	}
	return s.Strategy.Shards()
}

// Restore and OptimizerSteps are single's: every rank reads the whole state.

// CommStats is the rank's communication: Busy the total, Wait the exposed part.
func (s *Strategy) CommStats() comm.Stats { return s.track.Stats(s.cfg.Group) }

// Free waits for any collective still in flight and returns the memory.
func (s *Strategy) Free() {
	for _, op := range s.ops {
		if op != nil {
			op.Wait()
		}
	}
	s.Strategy.Free()
}
