package model

import (
	"fmt"

	"trellis/device"
)

// Params is where the model gets each unit's weights and puts its
// gradients. Units are numbered as in Layout: 0 the embedding (also used by
// the tied LM head), 1..L the blocks, L+1 the final LayerNorm.
//
// A forward pass calls Weights(u) … ReleaseWeights(u) around each unit's
// use (unit 0 twice: embedding and head). A backward pass visits the head
// (unit 0), the final LayerNorm (L+1), the blocks L..1 and the embedding
// (0), calling GradsDone(u) as soon as unit u's gradient for this
// micro-batch is complete: L+1, L, …, 1, then 0 last. Data parallelism can
// start reducing a unit's gradient at GradsDone; ZeRO-3 gathers in Weights
// and frees in ReleaseWeights.
type Params interface {
	Weights(u int) ([]float32, error) // unit u's params (ZeRO-3 gathers here)
	ReleaseWeights(u int)             // done with them until the next Weights(u)
	Grads(u int) ([]float32, error)   // unit u's grad buffer; backward ACCUMULATES into it
	GradsDone(u int) error            // unit u's grads for this micro-batch are final
}

// FlatParams is the single-device Params: the whole flat weight vector and
// the whole flat gradient vector, allocated through a device as param and
// grad.
type FlatParams struct {
	W      []float32 // (Layout.Size) weights
	G      []float32 // (Layout.Size) gradients, accumulated by Backward
	layout Layout
	w, g   *device.Buffer
}

// NewFlatParams allocates zeroed weights and gradients for cfg on dev.
func NewFlatParams(cfg Config, dev *device.Device) (*FlatParams, error) {
	return NewPartParams(cfg, Part{}, dev)
}

// NewPartParams allocates zeroed weights and gradients of part p of cfg
// (laid out as PartLayout) on dev.
func NewPartParams(cfg Config, p Part, dev *device.Device) (*FlatParams, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := p.Validate(cfg); err != nil {
		return nil, err
	}
	lay := cfg.PartLayout(p)
	w, err := dev.Alloc(device.Param, lay.Size)
	if err != nil {
		return nil, fmt.Errorf("model: parameters: %w", err)
	}
	g, err := dev.Alloc(device.Grad, lay.Size)
	if err != nil {
		w.Free()
		return nil, fmt.Errorf("model: gradients: %w", err)
	}
	return &FlatParams{W: w.Data, G: g.Data, layout: lay, w: w, g: g}, nil
}

// Layout is the layout the buffers follow.
func (f *FlatParams) Layout() Layout { return f.layout }

func (f *FlatParams) unit(u int) (Unit, error) {
	if u < 0 || u >= len(f.layout.Units) {
		return Unit{}, fmt.Errorf("model: unit %d out of range [0, %d)", u, len(f.layout.Units))
	}
	return f.layout.Units[u], nil
}

// Weights returns unit u's slice of W.
func (f *FlatParams) Weights(u int) ([]float32, error) {
	un, err := f.unit(u)
	if err != nil {
		return nil, err
	}
	return f.W[un.Offset : un.Offset+un.Size], nil
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

// Free returns both buffers to the device.
func (f *FlatParams) Free() {
	f.w.Free()
	f.g.Free()
	f.W, f.G = nil, nil
}
