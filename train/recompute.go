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

// recomputeNote is the run log's line on a plan's recomputation, or "":
// selective with flash=on drops nothing more (flash keeps no attention
// probabilities and its backward recomputes them already).
func recomputeNote(p plan.Plan) string {
	if p.Recompute == plan.RecomputeSelective && p.Flash {
		return "recompute=selective with flash=on is what flash already does: the stash keeps no attention probabilities (only log-sum-exps) and flash's backward recomputes them; nothing more is dropped"
	}
	return ""
}
