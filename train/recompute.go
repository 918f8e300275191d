package train

import (
	"trellis/model"
	"trellis/plan"
)

// engineRecompute is the model's activation recomputation for a plan's
// recompute key (plan.Recompute's values are validated by the parser):
// none, selective (the attention core; with flash=on what flash already
// does) or full (each layer's input kept, its forward rerun in the
// backward). Every parallel plan the engine runs supports all three.
func engineRecompute(r plan.Recompute) model.Recompute {
	switch r {
	case plan.RecomputeSelective:
		return model.RecomputeSelective
	case plan.RecomputeFull:
		return model.RecomputeFull
	}
	return model.RecomputeNone
}

// stashSaving is what flash attention and recomputation take off
// model.Config.RunnerBytes's stash (which has neither), in bytes, so that
// the memory estimate stays a lower bound for the plans that need them to
// fit.
func stashSaving(m model.Config, microBatch int, p plan.Plan) float64 {
	return 4 * (m.StashFloatCount(microBatch) - m.StashFloatCountFor(microBatch, p.Flash, engineRecompute(p.Recompute)))
}
