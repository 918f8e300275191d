package train

import (
	"strings"

	"trellis/comm"
	"trellis/model"
	"trellis/parallel"
	"trellis/plan"
	"trellis/precision"
)

// policy is the one precision policy of a plan's precision key: fp32;
// bf16 (Megatron's convention: bf16 weights, GEMM operands and saved
// operands, fp32 gradients, reductions, master weights and moments, the
// planner's plan/memory.go); fp16, the same with dynamic loss scaling from
// train.loss_scale (0: 65536), doubled after train.loss_scale_window
// clean steps (0: 1000); fp8, bf16 with the linear layers' GEMMs on fp8
// operands under train.fp8_recipe (delayed, the default, or blockwise;
// Config.Validate has checked the name) and its settings.
func policy(p plan.Precision, c Config) precision.Policy {
	switch p {
	case plan.FP8:
		return precision.FP8(fp8Settings(c))
	case plan.BF16:
		return precision.BF16()
	case plan.FP16:
		scale, window := c.LossScale, c.LossScaleWindow
		if scale == 0 {
			scale = 65536
		}
		if window == 0 {
			window = 1000
		}
		return precision.FP16(scale, window)
	}
	return precision.FP32()
}

// fp8Settings is the job's fp8 recipe with the defaults filled in.
func fp8Settings(c Config) precision.Float8 {
	r := precision.Delayed
	if c.FP8Recipe != "" {
		r, _ = precision.ParseRecipe(c.FP8Recipe)
	}
	f := precision.DefaultFP8(r)
	if c.FP8History > 0 {
		f.History = c.FP8History
	}
	if c.FP8Tile > 0 {
		f.Tile = c.FP8Tile
	}
	f.Margin = c.FP8Margin
	return f
}

// fp8Sync ends the step of a delayed-scaling run: the step's amaxes are
// reduced to their maximum over the data-parallel and tensor-parallel
// groups (which hold other micro-batches and other pieces of the same
// tensors), so that every rank's scales are the one device's.
func (r *rank) fp8Sync() error {
	return r.gpt.FP8Sync(func(v []float32) error {
		for _, g := range []comm.Group{r.top.grads, r.top.tpGroup} {
			if g == nil || g.Size() == 1 {
				continue
			}
			if err := g.AllReduce(comm.F32(v), comm.Max).Wait(); err != nil {
				return err
			}
		}
		return nil
	})
}

// engineRecompute is the model's activation recomputation for a plan's
// recompute key (plan.Recompute's values are validated by the parser):
// none, selective (the attention core; with flash=on what flash already
// does) or full (each layer's input kept, its forward rerun in the
// backward).
func engineRecompute(r plan.Recompute) model.Recompute {
	switch r {
	case plan.RecomputeSelective:
		return model.RecomputeSelective
	case plan.RecomputeFull:
		return model.RecomputeFull
	}
	return model.RecomputeNone
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

// update is the step's optimizer update, with the loss scaler's 1/S under
// loss scaling: a step whose gradients overflowed is skipped
// (res.skipped) and the scale updated.
func (r *rank) update(res *stepResult) error {
	u := parallel.Update{LR: res.lr, Clip: r.job.Train.GradClip}
	if r.scaler != nil {
		res.scale = r.scaler.Scale
		u.InvScale = 1 / r.scaler.Scale
	}
	out, err := r.st.Update(u)
	if err != nil {
		return err
	}
	res.norm, res.skipped = out.Norm, out.Skipped
	if r.scaler != nil {
		r.scaler.Update(out.Skipped)
	}
	return nil
}

// dlossScale is what the backward pass multiplies the loss by: S under
// loss scaling, else 1.
func (r *rank) dlossScale() float64 {
	if r.scaler == nil {
		return 1
	}
	return r.scaler.Scale
}

// runPlanText is the plan as the run line shows it: Short, which leaves
// out the planner's defaults (bf16 and flash=on among them), with the
// precision and flash attention always named.
func runPlanText(p plan.Plan) string {
	s := p.Short()
	for _, k := range []string{"precision", "flash"} { // the planner's defaults are not the engine's: name them
		if !strings.Contains(s, k+"=") {
			s += "," + k + "=" + p.Get(k)
		}
	}
	return s
}

// withScale adds the loss scaler's state to a checkpoint's meta.
func (r *rank) withScale(m Meta) Meta {
	if r.scaler != nil {
		m.LossScale, m.LossScaleClean, m.SkippedSteps = r.scaler.Scale, r.scaler.Clean, r.scaler.Skipped
	}
	return m
}

// restoreScale resumes the loss scaler from a checkpoint's meta (one saved
// by another precision keeps the configured start).
func (r *rank) restoreScale(m Meta) {
	if r.scaler != nil && m.LossScale >= 1 {
		r.scaler.Scale, r.scaler.Clean, r.scaler.Skipped = m.LossScale, m.LossScaleClean, m.SkippedSteps
	}
}
