package model

import (
	"fmt"

	"trellis/device"
	"trellis/ops"
	"trellis/precision"
	"trellis/tensor"
)

// Params is where the passes get each unit's weights and put its
// gradients. Units are numbered as in arch.Layout: 0 the embedding (also
// used by the tied LM head), 1..L the blocks, L+1 the final norm.
//
// Weights(u) hands out unit u's weights in the policy's Param dtype (the
// compute copy: the strategy that owns a weight rounds, gathers or
// shards it; the runner keeps no copy of its own), laid out as the
// runner's Layout unit. A forward pass calls Weights(u) …
// ReleaseWeights(u) around each unit's use (unit 0 twice: embedding and
// head). A backward pass visits the head (unit 0), the final norm (L+1),
// the blocks L..1 and the embedding (0), calling GradsDone(u) as soon as
// unit u's gradient for this micro-batch is complete: L+1, L, …, 1, then 0
// last (with a split backward, a block's at the end of its weight pass).
// Gradients are fp32 and ACCUMULATE. Data parallelism can start reducing
// a unit's gradient at GradsDone; ZeRO-3 gathers in Weights and frees in
// ReleaseWeights.
type Params interface {
	Weights(u int) (tensor.Buf, error) // unit u's weights in the Param dtype
	ReleaseWeights(u int)              // done with them until the next Weights(u)
	Grads(u int) ([]float32, error)    // unit u's fp32 gradient buffer
	GradsDone(u int) error             // unit u's gradients for this micro-batch are final
}

// FlatParams is the simplest Params: one rank's whole flat weight and
// gradient vectors (its part of every unit), fp32, allocated through a
// device as param and grad. Under a mixed policy (Policy.Mixed) W are
// master weights (charged to optim) and the weights handed out are their
// rounding in a Param-dtype copy (charged to param), refreshed by Sync.
// It is what tests and inference run on; training runs on a strategy
// (parallel/zero).
type FlatParams struct {
	W      []float32 // (Layout.Size) weights
	G      []float32 // (Layout.Size) gradients, accumulated by the backward
	layout Layout
	w, g   *device.Buffer
	half   *device.Buffer // the Param-dtype copy (nil in fp32)
}

// NewFlatParams allocates zeroed fp32 weights and gradients of the whole
// model on dev.
func NewFlatParams(cfg Config, dev *device.Device) (*FlatParams, error) {
	return NewPartParams(cfg, Part{}, precision.FP32(), dev)
}

// NewPartParams allocates zeroed weights and gradients of part p of cfg
// (laid out as PartLayout) on dev, for passes under policy pol.
func NewPartParams(cfg Config, p Part, pol precision.Policy, dev *device.Device) (*FlatParams, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := p.Validate(cfg); err != nil {
		return nil, err
	}
	lay := cfg.PartLayout(p)
	wtag := device.Param
	if pol.Mixed() {
		wtag = device.Optim
	}
	w, err := dev.Alloc(wtag, lay.Size)
	if err != nil {
		return nil, fmt.Errorf("model: parameters: %w", err)
	}
	f := &FlatParams{W: w.Data, layout: lay, w: w}
	if f.g, err = dev.Alloc(device.Grad, lay.Size); err != nil {
		f.Free()
		return nil, fmt.Errorf("model: gradients: %w", err)
	}
	f.G = f.g.Data
	if pol.Mixed() {
		if f.half, err = dev.AllocOf(device.Param, pol.Param, lay.Size); err != nil {
			f.Free()
			return nil, fmt.Errorf("model: %s weights: %w", pol.Param, err)
		}
	}
	return f, nil
}

// Layout is the layout the buffers follow.
func (f *FlatParams) Layout() Layout { return f.layout }

// Sync rounds W into the Param-dtype copy (after W changed); nothing in fp32.
func (f *FlatParams) Sync(k ops.Backend) {
	if f.half != nil {
		k.Encode(f.half.Buf(), f.W)
	}
}

func (f *FlatParams) unit(u int) (Unit, error) {
	if u < 0 || u >= len(f.layout.Units) {
		return Unit{}, fmt.Errorf("model: unit %d out of range [0, %d)", u, len(f.layout.Units))
	}
	return f.layout.Units[u], nil
}

// Weights returns unit u's slice of W, or of its Param-dtype copy.
func (f *FlatParams) Weights(u int) (tensor.Buf, error) {
	un, err := f.unit(u)
	if err != nil {
		return tensor.Buf{}, err
	}
	if f.half != nil {
		return f.half.Buf().Slice(un.Offset, un.Offset+un.Size), nil
	}
	return tensor.F32s(f.W[un.Offset : un.Offset+un.Size]), nil
}

// ReleaseWeights does nothing: the weights stay resident.
func (f *FlatParams) ReleaseWeights(int) {}

// Grads returns unit u's slice of G.
func (f *FlatParams) Grads(u int) ([]float32, error) {
	un, err := f.unit(u)
	if err != nil {
		return nil, err
	}
	return f.G[un.Offset : un.Offset+un.Size], nil
}

// GradsDone does nothing: there is nothing to reduce on one device.
func (f *FlatParams) GradsDone(int) error { return nil }

// ZeroGrads sets every gradient to 0 (before a step's first micro-batch).
func (f *FlatParams) ZeroGrads() { clear(f.G) }

// Free returns the buffers to the device.
func (f *FlatParams) Free() {
	f.w.Free()
	f.g.Free()
	f.half.Free()
	f.W, f.G = nil, nil
}
