package optim

import (
	"fmt"
	"math"

	"trellis/device"
	"trellis/ops"
)

// Hyper holds AdamW's hyperparameters other than the learning rate, which
// comes from the Schedule at every step.
type Hyper struct {
	Beta1       float64 `toml:"beta1"`        // in [0,1)
	Beta2       float64 `toml:"beta2"`        // in [0,1)
	Eps         float64 `toml:"eps"`          // > 0
	WeightDecay float64 `toml:"weight_decay"` // λ >= 0, applied to Config.Decay only
}

// DefaultHyper is GPT-2's recipe as nanoGPT trains it: β1 0.9, β2 0.95,
// ε 1e-8, weight decay 0.1.
func DefaultHyper() Hyper {
	return Hyper{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
}

// Validate names the first field that breaks its rule.
func (h Hyper) Validate() error {
	switch {
	case !(h.Beta1 >= 0 && h.Beta1 < 1):
		return fmt.Errorf("optim: beta1=%g must be in [0,1)", h.Beta1)
	case !(h.Beta2 >= 0 && h.Beta2 < 1):
		return fmt.Errorf("optim: beta2=%g must be in [0,1)", h.Beta2)
	case !(h.Eps > 0) || math.IsInf(h.Eps, 0):
		return fmt.Errorf("optim: eps=%g must be a positive finite number", h.Eps)
	case !(h.WeightDecay >= 0) || math.IsInf(h.WeightDecay, 0):
		return fmt.Errorf("optim: weight_decay=%g must be a finite number >= 0", h.WeightDecay)
	}
	return nil
}

// Config sets up an AdamW optimizer over one flat buffer or one shard of it.
type Config struct {
	Params []float32 // the parameters this optimizer updates in place
	Grads  []float32 // their gradients, len(Grads) == len(Params)
	// Offset is the index of Params[0] in the global flat parameter buffer:
	// 0 for a whole buffer, the shard's start under ZeRO. Decay ranges are
	// global and are intersected with [Offset, Offset+len(Params)).
	Offset int
	// Decay lists the ranges of the global flat buffer that receive weight
	// decay; elements outside them get none. It must be non-nil when
	// Hyper.WeightDecay > 0 (an empty, non-nil slice decays nothing). The
	// default for GPT models is Decay2D: matrices and embeddings, not biases
	// or LayerNorm parameters.
	Decay   []Range
	Hyper   Hyper
	Device  *device.Device // m and v are allocated here, tag device.Optim
	Kernels ops.Backend    // the update's kernels (ops.Backend.AdamW)
}

// Validate checks the configuration, naming the field.
func (c Config) Validate() error {
	if err := c.Hyper.Validate(); err != nil {
		return err
	}
	switch {
	case len(c.Grads) != len(c.Params):
		return fmt.Errorf("optim: len(grads)=%d must equal len(params)=%d", len(c.Grads), len(c.Params))
	case c.Offset < 0:
		return fmt.Errorf("optim: offset=%d must be >= 0", c.Offset)
	case c.Device == nil:
		return fmt.Errorf("optim: device must be set (m and v are allocated on it)")
	case c.Kernels == nil:
		return fmt.Errorf("optim: kernels must be set (the update runs through them)")
	case c.Decay == nil && c.Hyper.WeightDecay > 0:
		return fmt.Errorf("optim: decay ranges must be given when weight_decay=%g > 0 (see optim.Decay2D)", c.Hyper.WeightDecay)
	}
	return checkRanges(c.Decay)
}

// AdamW is the optimizer of one rank: it owns the first and second moments
// m and v of its parameters (or parameter shard).
type AdamW struct {
	params, grads []float32
	m, v          *device.Buffer // (n,) each, tag optim
	segs          []segment
	hyper         Hyper
	kernels       ops.Backend
	step          int // updates applied so far
}

// New validates cfg and allocates m and v (zeroed) on cfg.Device. The
// allocation fails with the device's out-of-memory error if the budget is
// exceeded.
func New(cfg Config) (*AdamW, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := len(cfg.Params)
	m, err := cfg.Device.Alloc(device.Optim, n)
	if err != nil {
		return nil, fmt.Errorf("optim: first moment: %w", err)
	}
	v, err := cfg.Device.Alloc(device.Optim, n)
	if err != nil {
		m.Free()
		return nil, fmt.Errorf("optim: second moment: %w", err)
	}
	return &AdamW{
		params: cfg.Params, grads: cfg.Grads, m: m, v: v,
		segs:  segments(cfg.Offset, n, cfg.Decay),
		hyper: cfg.Hyper, kernels: cfg.Kernels,
	}, nil
}

// Len is the number of parameters the optimizer updates.
func (o *AdamW) Len() int { return len(o.params) }

// Steps is the number of updates applied so far.
func (o *AdamW) Steps() int { return o.step }

// Step applies one AdamW update (see ops.AdamW for the formula) with
// learning rate lr, using gradScale·grads as the gradient (pass
// ClipScale's factor, or 1). Elements in the decay ranges use the configured
// weight decay, the others none. The step count rises by one before the
// update, so the first update has bias-correction step t = 1. A NaN or Inf
// gradient (or scale) would poison m and v: check the global norm first and
// skip the step instead.
func (o *AdamW) Step(lr, gradScale float64) {
	o.step++
	h := ops.AdamWHyper{
		LR: float32(lr), Beta1: float32(o.hyper.Beta1), Beta2: float32(o.hyper.Beta2),
		Eps: float32(o.hyper.Eps), GradScale: float32(gradScale), Step: o.step,
	}
	m, v := o.m.Data, o.v.Data
	for _, s := range o.segs {
		h.WeightDecay = 0
		if s.decay {
			h.WeightDecay = float32(o.hyper.WeightDecay)
		}
		p, g, ms, vs := o.params[s.lo:s.hi], o.grads[s.lo:s.hi], m[s.lo:s.hi], v[s.lo:s.hi]
		o.kernels.AdamW(h, p, g, ms, vs)
	}
}

// State is what a checkpoint stores to resume the optimizer bit-identically.
type State struct {
	Step int       // updates applied so far
	M    []float32 // first moment of this rank's parameters, (n,)
	V    []float32 // second moment, (n,)
}

// State returns the optimizer's state. M and V alias the optimizer's
// buffers (no copy): write them out before the next Step.
func (o *AdamW) State() State {
	return State{Step: o.step, M: o.m.Data, V: o.v.Data}
}

// Restore copies a saved state in. The moments must have the optimizer's
// length and the step count must be >= 0.
func (o *AdamW) Restore(s State) error {
	n := len(o.params)
	switch {
	case s.Step < 0:
		return fmt.Errorf("optim: restore: step=%d must be >= 0", s.Step)
	case len(s.M) != n || len(s.V) != n:
		return fmt.Errorf("optim: restore: state has len(m)=%d, len(v)=%d; this optimizer holds %d parameters", len(s.M), len(s.V), n)
	}
	copy(o.m.Data, s.M)
	copy(o.v.Data, s.V)
	o.step = s.Step
	return nil
}

// Free returns m and v to the device. The optimizer must not be used
// afterwards.
func (o *AdamW) Free() {
	o.m.Free()
	o.v.Free()
}
