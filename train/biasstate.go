package train

import (
	"fmt"
	"math"
	"slices"

	"trellis/checkpoint"
	"trellis/metrics"
	"trellis/model"
)

// The expert biases of auxiliary-loss-free balancing (model.router_expert_bias;
// model/bias.go) in a checkpoint. Every rank holds every MoE block's bias
// and moves it after each optimizer step by the step's loads summed over
// the world (expertStats: a block's assignments are counted on the
// ranks of its pipeline stage, summed exactly over their data- and
// expert-parallel replicas), so between steps the biases are the one
// device's on every rank, whatever the plan. A checkpoint holds one
// global tensor a block,
//
//	moe.layers.{l}.expert_bias  [E]  the bias the next step selects with
//
// written by the rank at dp = cp = tp = 0 of the pipeline stage that runs
// block l, so once. Plan-free, they reshard by name alone: a run resumed
// under any dp, ep, ZeRO stage or pp split loads every block's bias and
// continues the same routing (bit for bit under the same plan). A
// checkpoint of a run with router_expert_bias always holds them
// (sameRun refuses another model), so one missing, of another shape or
// not finite is an error, never silently zero.

func biasName(l int) string { return fmt.Sprintf("moe.layers.%d.expert_bias", l) }

// biasShards are the expert biases this rank saves: its stage's MoE
// blocks' on the rank at dp = cp = tp = 0, nothing elsewhere or without
// router_expert_bias.
func (r *rank) biasShards() []checkpoint.Shard {
	cfg := r.job.Model
	if !cfg.RouterExpertBias || !r.savesStageState() {
		return nil
	}
	var out []checkpoint.Shard
	for _, l := range r.stageBlocks() {
		if cfg.MoELayer(l) {
			out = append(out, checkpoint.Whole(biasName(l), []int{cfg.Experts}, r.gpt.ExpertBias(l)))
		}
	}
	return out
}

// readExpertBias reads every MoE block's expert bias of cfg from c
// (nil without router_expert_bias), verifying each: present, [E], finite.
func readExpertBias(c *checkpoint.Checkpoint, cfg model.Config) (map[int][]float32, error) {
	if !cfg.RouterExpertBias {
		return nil, nil
	}
	ix := c.Index()
	out := map[int][]float32{}
	for l := range cfg.Layers {
		if !cfg.MoELayer(l) {
			continue
		}
		name := biasName(l)
		e, ok := ix.Tensors[name]
		if !ok {
			return nil, fmt.Errorf("%s: no tensor %q, which model.router_expert_bias=true needs", c.Dir(), name)
		}
		if !slices.Equal(e.Shape, []int{cfg.Experts}) {
			return nil, fmt.Errorf("%s: tensor %q has shape %v, want [%d] (model.experts)", c.Dir(), name, e.Shape, cfg.Experts)
		}
		b, err := readFloat32(c, name)
		if err != nil {
			return nil, err
		}
		for i, v := range b {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return nil, fmt.Errorf("%s: tensor %q: element %d is %v, want a finite bias", c.Dir(), name, i, v)
			}
		}
		out[l] = b
	}
	return out, nil
}

// setExpertBias gives gpt's MoE blocks the biases of bias (blocks absent
// keep theirs).
func setExpertBias(gpt *model.GPT, bias map[int][]float32) error {
	for l, b := range bias {
		if err := gpt.SetExpertBias(l, b); err != nil {
			return err
		}
	}
	return nil
}

// restoreBias loads every MoE block's expert bias from c.
func (r *rank) restoreBias(c *checkpoint.Checkpoint) error {
	b, err := readExpertBias(c, r.job.Model)
	if err != nil {
		return fmt.Errorf("--resume: %w", err)
	}
	return setExpertBias(r.gpt, b)
}

// updateBias applies the step's rule to every MoE block's bias from the
// step's loads over the world, and records the new biases in ex.
func (r *rank) updateBias(ex *metrics.Experts) error {
	if ex == nil || !r.job.Model.RouterExpertBias {
		return nil
	}
	if err := r.gpt.UpdateExpertBias(ex.Layers, ex.Load); err != nil {
		return err
	}
	ex.Bias = ex.Bias[:0]
	for _, l := range ex.Layers {
		ex.Bias = append(ex.Bias, r.gpt.ExpertBias(l))
	}
	return nil
}
