package optim

import (
	"fmt"
	"math"
)

// Schedule is linear warmup followed by cosine decay to a floor. With s the
// number of updates already applied (0 for the first update), W = Warmup and
// S = Steps:
//
//	LR(s) = LR · (s+1)/W                                   s < W
//	LR(s) = MinLR + ½(1 + cos(π·(s−W)/(S−W))) · (LR − MinLR)   W ≤ s < S
//	LR(s) = MinLR                                          s ≥ S
//
// so the first update uses LR/W, the update after warmup uses exactly LR, and
// the rate falls towards MinLR over the remaining S−W updates (llm.c's and
// nanoGPT's schedule).
type Schedule struct {
	Warmup int     // updates of linear warmup, 0 ≤ Warmup ≤ Steps
	Steps  int     // total updates of the run (the schedule's length)
	LR     float64 // peak rate, > 0
	MinLR  float64 // floor of the cosine, 0 ≤ MinLR ≤ LR
}

// Validate names the first field that breaks its rule.
func (s Schedule) Validate() error {
	switch {
	case s.Steps < 1:
		return fmt.Errorf("optim: schedule: steps=%d must be >= 1", s.Steps)
	case s.Warmup < 0 || s.Warmup > s.Steps:
		return fmt.Errorf("optim: schedule: warmup=%d must be in [0, steps=%d]", s.Warmup, s.Steps)
	case !(s.LR > 0) || math.IsInf(s.LR, 0):
		return fmt.Errorf("optim: schedule: lr=%g must be a positive finite number", s.LR)
	case !(s.MinLR >= 0 && s.MinLR <= s.LR):
		return fmt.Errorf("optim: schedule: min_lr=%g must be in [0, lr=%g]", s.MinLR, s.LR)
	}
	return nil
}

// At returns the rate LR(step) for the update that follows `step` applied
// updates. (The method cannot be called LR: that is the peak-rate field.)
func (s Schedule) At(step int) float64 {
	switch {
	case step < 0:
		step = 0
	case step >= s.Steps:
		return s.MinLR
	}
	if step < s.Warmup {
		return s.LR * float64(step+1) / float64(s.Warmup)
	}
	d := float64(step-s.Warmup) / float64(s.Steps-s.Warmup)
	return s.MinLR + 0.5*(1+math.Cos(math.Pi*d))*(s.LR-s.MinLR)
}
