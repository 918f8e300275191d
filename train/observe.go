package train

import (
	"fmt"

	"trellis/mesh"
)

// Observer watches a run as rank 0 reports it (a live dashboard, a test).
// Its methods are called on rank 0's training goroutine, so they must
// return at once: take what is needed and hand it to another goroutine;
// never block and never do I/O there.
type Observer interface {
	// Start is called once, before the first step.
	Start(RunInfo)
	// Step is called after every step with its --metrics object (one JSON
	// object without the newline); the slice is the observer's to keep.
	Step(line []byte)
	// Sample is called with each generated sample (the prompt, then the
	// continuation).
	Sample(step int, text string)
}

// RunInfo describes a run for an Observer.
type RunInfo struct {
	Plan          string             // canonical plan text
	Ranks         int                // world size
	Budget        int64              // bytes per device; 0: none
	Params        int64              // model parameters
	TokensPerStep int                // all ranks, one optimizer step
	FromStep      int                // steps completed before this run
	ToStep        int                // the last step this run takes
	Model         string             // the model's shape, for people
	Groups        map[string][][]int // mesh axis -> the rank lists of its groups
	Experts       int                // routed experts per MoE block (0: a dense model)
}

// runInfo describes the run; a mesh that cannot be built leaves Groups
// empty (the run itself fails on it elsewhere).
func runInfo(o Options, s settings, start, end int) RunInfo {
	m := o.Job.Model
	info := RunInfo{Plan: s.enginePlan.String(), Ranks: s.ranks, Budget: s.budget, Params: int64(m.NumParams()),
		TokensPerStep: o.Job.Train.GlobalBatch * m.SeqLen, FromStep: start, ToStep: end,
		Model:   fmt.Sprintf("layers=%d hidden=%d heads=%d seq_len=%d vocab=%d", m.Layers, m.Hidden, m.Heads, m.SeqLen, m.Vocab),
		Experts: m.Experts}
	p := s.enginePlan
	ms, err := mesh.New(mesh.Config{PP: p.PP, DP: p.DP, CP: p.CP, TP: p.TP, Order: p.Order, World: s.ranks})
	if err != nil {
		return info
	}
	info.Groups = map[string][][]int{}
	for _, ax := range mesh.Axes() {
		if gs, err := ms.Groups(ax); err == nil {
			info.Groups[string(ax)] = gs
		}
	}
	return info
}
