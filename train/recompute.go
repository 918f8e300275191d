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
