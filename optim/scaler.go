package optim

import (
	"fmt"
	"math"
)

// LossScaler is fp16's dynamic loss scaling (Micikevicius et al. 2018): the
// loss is multiplied by Scale before the backward pass so that small
// gradients survive fp16, and the gradients are divided by it before the
// update. A step whose gradients overflow (an inf or NaN anywhere, on any
// rank: the global gradient norm is not finite) is skipped and the scale
// halved; after Window clean steps in a row the scale doubles.
type LossScaler struct {
	Scale   float64 // the current scale S
	Window  int     // clean steps before S doubles
	Clean   int     // clean steps since the last overflow or growth
	Skipped int     // steps skipped so far
}

// NewLossScaler starts at scale, growing after window clean steps.
func NewLossScaler(scale float64, window int) (*LossScaler, error) {
	if !(scale >= 1) || math.IsInf(scale, 0) {
		return nil, fmt.Errorf("train.loss_scale=%g must be a finite number >= 1", scale)
	}
	if window < 1 {
		return nil, fmt.Errorf("train.loss_scale_window=%d must be >= 1", window)
	}
	return &LossScaler{Scale: scale, Window: window}, nil
}

// Update records a step: overflow (the step was skipped) halves the
// scale, down to 1; otherwise after Window clean steps it doubles.
func (s *LossScaler) Update(overflow bool) {
	if overflow {
		s.Scale = math.Max(1, s.Scale/2)
		s.Clean = 0
		s.Skipped++
		return
	}
	if s.Clean++; s.Clean >= s.Window {
		s.Scale *= 2
		s.Clean = 0
	}
}
