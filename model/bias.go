package model

import "fmt"

// DeepSeek-V3's auxiliary-loss-free load balancing (arch's moe.go,
// router_expert_bias): each MoE layer's experts carry a bias b (E fp32
// values), added to the router's scores for the top-k selection alone —
// the gates stay the unbiased scores — and moved after every optimizer
// step by
//
//	b_e += u·sign(mean_e'(load_e') − load_e)
//
// load_e the assignments expert e got over the whole step (every
// micro-batch of every data-parallel rank). The sign is taken exactly on
// the integer counts, sign(Σ_e' load_e' − E·load_e), so every rank given
// the same counts moves its biases by the same bits. The biases are the
// model's state between steps: a pass reads them, only UpdateExpertBias
// and SetExpertBias write them (between steps), so a backward recomputing
// its routing from the saved scores selects what its forward selected.
// train moves them after every step, one whose update a loss scaler
// skipped for an overflow too (its tokens were routed; Megatron-Core
// updates them in finalize_model_grads, before the optimizer step).

// biasOf is block layer's bias (nil without router_expert_bias or for a
// dense block).
func (m *GPT) biasOf(layer int) []float32 {
	if m.bias == nil {
		return nil
	}
	i, ok := m.stats.index[layer]
	if !ok {
		return nil
	}
	return m.bias[i]
}

// ExpertBias is a copy of MoE block layer's expert bias (E values; nil
// without router_expert_bias).
func (m *GPT) ExpertBias(layer int) []float32 {
	b := m.biasOf(layer)
	if b == nil {
		return nil
	}
	return append([]float32(nil), b...)
}

// SetExpertBias sets MoE block layer's expert bias to b (E values), as a
// checkpoint's or a test's starting point; between steps only.
func (m *GPT) SetExpertBias(layer int, b []float32) error {
	dst := m.biasOf(layer)
	if dst == nil {
		return fmt.Errorf("model: expert bias of block %d: the block has none (router_expert_bias=%v, MoE layer %v)", layer, m.cfg.RouterExpertBias, m.cfg.MoELayer(layer))
	}
	if len(b) != len(dst) {
		return fmt.Errorf("model: expert bias of block %d: %d values, want experts=%d", layer, len(b), len(dst))
	}
	copy(dst, b)
	return nil
}

// UpdateExpertBias applies one step's rule to every block of layers
// (MoE blocks, as ExpertStats.Layers) whose loads over the whole step are
// load[i] (E counts each); blocks without a bias are skipped (a dense
// model, router_expert_bias off).
func (m *GPT) UpdateExpertBias(layers []int, load [][]int64) error {
	if m.bias == nil {
		return nil
	}
	if len(load) != len(layers) {
		return fmt.Errorf("model: expert bias update: %d load rows for %d blocks", len(load), len(layers))
	}
	u := float32(m.cfg.BiasRate())
	for i, l := range layers {
		b := m.biasOf(l)
		if b == nil {
			continue
		}
		if len(load[i]) != len(b) {
			return fmt.Errorf("model: expert bias update of block %d: %d loads, want experts=%d", l, len(load[i]), len(b))
		}
		biasStep(b, load[i], u)
	}
	return nil
}

// biasStep is b_e += u·sign(mean(load) − load_e), the sign taken on the
// integers Σ_e' load_e' − E·load_e.
func biasStep(b []float32, load []int64, u float32) {
	var sum int64
	for _, v := range load {
		sum += v
	}
	E := int64(len(load))
	for e, v := range load {
		switch d := sum - E*v; {
		case d > 0:
			b[e] += u
		case d < 0:
			b[e] -= u
		}
	}
}
