// Package tp is Megatron tensor parallelism (Shoeybi et al. 2019) and
// sequence parallelism (Korthikanti et al. 2022) over a comm.Group: the
// communication points model.TPComm names, which the model's layers call.
//
// The layers (their math is in package model, which calls these points
// and never the network): with t ranks, rank r,
//
//	column-parallel  Y_r = X·W_rᵀ + b_r, W = [W_1; …; W_t] split by output
//	                 rows (QKV by heads, MLP fc by its 4C/t outputs).
//	                 f: forward identity, backward dX = Σ_r dX_r (ReduceFromTP)
//	row-parallel     Y = Σ_r X_r·W_rᵀ + b, W = [W_1 … W_t] split by input
//	                 columns (attention and MLP projections), b added once.
//	                 g: forward Σ_r (ReduceFromTP), backward identity
//	vocab-parallel   wte split by rows (V/t, padded); the lookup masks
//	                 foreign ids and sums (ReduceFromTP); the loss reduces
//	                 the row max (MaxOverTP), the sum of exps and the target
//	                 logit (ReduceFromTP) and never gathers (B,T,V) logits
//	sequence-par.    LayerNorm, dropout and residual regions hold B·T/t
//	                 tokens: f becomes GatherSeq (backward ScatterSeq), g
//	                 becomes ScatterSeq (backward GatherSeq); LayerNorm
//	                 parameter gradients are summed (ReduceFromTP).
//
// Bytes a rank passes to the group per layer and micro-batch (fp32, n =
// B·T·C; Comm's group Stats count them): without SP, two all-reduces of n
// in the forward pass (g after attention and after the MLP) and two in the
// backward (f before each); with SP, in the forward two all-gathers of n/t
// (f) and two reduce-scatters of n (g); in the backward two all-gathers of
// n/t (g's conjugate) plus two re-gathers of the LayerNorm outputs the
// stash keeps at n/t, two reduce-scatters of n (f's conjugate) and two
// all-reduces of the 2C LayerNorm parameter gradients.
package tp

import (
	"errors"
	"fmt"

	"trellis/comm"
	"trellis/model"
)

// Comm is model.TPComm over a tensor-parallel group: every point is a
// collective on the group's queue, blocking except the Start forms.
type Comm struct {
	g comm.Group
}

// New wraps the tensor-parallel group g (the ranks along the mesh's tp
// axis). It does not close g.
func New(g comm.Group) (*Comm, error) {
	if g == nil {
		return nil, errors.New("tp: nil group")
	}
	return &Comm{g: g}, nil
}

var _ model.TPComm = (*Comm)(nil)

// Part is the model part of this rank: rank g.Rank() of g.Size().
func (c *Comm) Part(sp bool) model.Part {
	return model.Part{TP: c.g.Size(), Rank: c.g.Rank(), SP: sp}
}

// Group is the tensor-parallel group.
func (c *Comm) Group() comm.Group { return c.g }

// ReduceFromTP sums x over the group in place.
func (c *Comm) ReduceFromTP(x []float32) error {
	return wrap("all-reduce", comm.AllReduce(c.g, comm.F32(x), comm.Sum))
}

// MaxOverTP takes the elementwise maximum over the group in place.
func (c *Comm) MaxOverTP(x []float32) error {
	return wrap("all-reduce max", comm.AllReduce(c.g, comm.F32(x), comm.Max))
}

// GatherSeq concatenates every rank's src into dst in rank order.
func (c *Comm) GatherSeq(dst, src []float32) error {
	return wrap("all-gather", comm.AllGather(c.g, comm.F32(dst), comm.F32(src)))
}

// ScatterSeq sums src over the group and keeps this rank's chunk in dst.
func (c *Comm) ScatterSeq(dst, src []float32) error {
	return wrap("reduce-scatter", comm.ReduceScatter(c.g, comm.F32(dst), comm.F32(src), comm.Sum))
}

// StartReduceFromTP issues ReduceFromTP and returns its wait.
func (c *Comm) StartReduceFromTP(x []float32) func() error {
	w := c.g.AllReduce(comm.F32(x), comm.Sum)
	return func() error { return wrap("all-reduce", w.Wait()) }
}

// StartScatterSeq issues ScatterSeq and returns its wait.
func (c *Comm) StartScatterSeq(dst, src []float32) func() error {
	w := c.g.ReduceScatter(comm.F32(dst), comm.F32(src), comm.Sum)
	return func() error { return wrap("reduce-scatter", w.Wait()) }
}

// Stats is this rank's communication on the group.
func (c *Comm) Stats() comm.Stats { return c.g.Stats() }

func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("tp: %s: %w", op, err)
}
