package hf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"trellis/model"
)

// A mixture-of-experts Llama (model.experts > 0, arch's moe.go) moves
// between Trellis and Hugging Face's Qwen2MoeForCausalLM (model_type
// "qwen2_moe"), the one Hugging Face architecture that computes its block
// exactly:
//
//	Trellis                                    Qwen2MoeForCausalLM
//	p = softmax(z·W_routerᵀ), top-k of p        the same (F.softmax, torch.topk)
//	gates g = p of the chosen k                 norm_topk_prob: false (no renormalising)
//	Σ_j g_j·SwiGLU_e(z), F_e wide               experts.{e}.{gate,up,down}_proj, moe_intermediate_size
//	no shared expert                            shared_expert_intermediate_size: 0 (its output
//	                                            sigmoid(z·w)·0 = 0; w written as zeros)
//	layer l MoE iff l ≥ dense_first and         layer i sparse iff i ∉ mlp_only_layers and
//	  moe_every | l − dense_first                 (i+1) % decoder_sparse_step = 0 (qwenLayers:
//	                                              step moe_every and leading dense layers where
//	                                              that is exact, else step 1 and every dense layer)
//	dense layers' SwiGLU, ffn_hidden wide       mlp.{gate,up,down}_proj, intermediate_size
//	q, k, v without biases                      q_proj, k_proj, v_proj biases (qkv_bias: true), written as zeros
//	attention, RoPE, RMSNorm, head              Llama's (llama.go): same names, same rotate_half RoPE
//	aux_loss α                                  router_aux_loss_coef, output_router_logits: α > 0
//
// The others are not exact: Qwen3MoeForCausalLM RMS-normalises every q
// and k head (q_norm, k_norm, no switch); MixtralForCausalLM's gates are
// the softmax over the chosen k logits, the renormalised probabilities
// (Qwen's norm_topk_prob: true); DeepSeek-V2/V3's ungated shared experts
// and sigmoid router come with multi-head latent attention. The experts'
// stacked (E, 2F_e, C) [gate | up] and (E, C, F_e) tensors become E
// (F_e, C), (F_e, C) and (C, F_e) matrices a layer, (out, in) as every
// Linear, unchanged in value.
//
// The auxiliary loss is a training term, not part of the function the
// checkpoint computes: transformers' load_balancing_loss_func pools the
// router logits of every layer and counts f_e per slot (k times Trellis's
// per-layer f_e), so the same coefficient weighs a differently normalised
// loss. A Trellis model with a capacity factor drops tokens that
// Qwen2-MoE (dropless) keeps: Write refuses it, and trellis export
// --dropless writes the same weights as the dropless model.

// Qwen2MoeConfig is the part of a Hugging Face Qwen2MoeConfig
// (config.json) that decides the architecture; pointers tell absent from
// zero where transformers' default is not zero.
type Qwen2MoeConfig struct {
	decoderConfig
	RopeParameters               json.RawMessage `json:"rope_parameters,omitempty"`
	UseSlidingWindow             bool            `json:"use_sliding_window"`
	LayerTypes                   []string        `json:"layer_types,omitempty"`
	QKVBias                      *bool           `json:"qkv_bias,omitempty"`
	NumExperts                   *int            `json:"num_experts,omitempty"`
	NumExpertsPerTok             *int            `json:"num_experts_per_tok,omitempty"`
	MoEIntermediateSize          *int            `json:"moe_intermediate_size,omitempty"`
	SharedExpertIntermediateSize *int            `json:"shared_expert_intermediate_size,omitempty"`
	DecoderSparseStep            *int            `json:"decoder_sparse_step,omitempty"`
	MLPOnlyLayers                []int           `json:"mlp_only_layers"`
	NormTopKProb                 bool            `json:"norm_topk_prob"`
	OutputRouterLogits           bool            `json:"output_router_logits"`
	RouterAuxLossCoef            *float64        `json:"router_aux_loss_coef,omitempty"`
}

// Transformers' Qwen2MoeConfig defaults for fields a config.json may omit
// and Trellis reads (the sizes without a default Trellis can assume —
// num_experts, num_experts_per_tok, moe_intermediate_size — are required).
const (
	qwenKVHeads   = 16
	qwenEps       = 1e-6
	qwenTheta     = 10000.0
	qwenSharedFFN = 5632
	qwenAuxCoef   = 0.001
)

// Qwen2MoeConfigOf is the config.json of a Trellis MoE Llama, or the
// error naming the field that no Hugging Face architecture computes
// exactly.
func Qwen2MoeConfigOf(c model.Config, dtype string) (Qwen2MoeConfig, error) {
	if err := exportableMoE(c); err != nil {
		return Qwen2MoeConfig{}, err
	}
	E, K, Fe, zero, bias, aux := c.Experts, c.TopK, c.ExpertWidth(), 0, true, c.AuxLoss
	step, dense := qwenLayers(c)
	return Qwen2MoeConfig{decoderConfig: decoderOf(c, "Qwen2MoeForCausalLM", "qwen2_moe", dtype), QKVBias: &bias,
		NumExperts: &E, NumExpertsPerTok: &K, MoEIntermediateSize: &Fe, SharedExpertIntermediateSize: &zero,
		DecoderSparseStep: &step, MLPOnlyLayers: dense, OutputRouterLogits: aux > 0, RouterAuxLossCoef: &aux,
	}, nil
}

// Exportable is nil when Write writes c's model, else the error naming
// the key that no Hugging Face architecture computes exactly (an MoE
// model's router_score, shared_experts or capacity_factor).
func Exportable(c model.Config) error {
	if c.Experts > 0 {
		return exportableMoE(c)
	}
	return nil
}

// exportableMoE refuses, naming the key, the MoE models Qwen2-MoE does
// not compute and no other Hugging Face architecture computes either.
func exportableMoE(c model.Config) error {
	var errs []error
	if c.SigmoidRouter() {
		errs = append(errs, fmt.Errorf("hf: model.router_score=%q: Qwen2MoeForCausalLM routes by softmax; Hugging Face's sigmoid router with normalised top-k gates is DeepseekV3ForCausalLM's, which needs multi-head latent attention (Trellis's block has standard attention): not exported", c.RouterScore))
	}
	if c.SharedExperts > 0 {
		errs = append(errs, fmt.Errorf("hf: model.shared_experts=%d: Qwen2MoeForCausalLM gates its shared expert by sigmoid(x·w) and DeepSeek-V2/V3's ungated shared experts come with multi-head latent attention; no Hugging Face architecture computes a Llama block with ungated shared experts: not exported", c.SharedExperts))
	}
	if c.CapacityFactor > 0 {
		errs = append(errs, fmt.Errorf("hf: model.capacity_factor=%g: Qwen2MoeForCausalLM is dropless (every token reaches its k experts), Trellis drops assignments past an expert's capacity; export the dropless model (trellis export --dropless, capacity_factor=0)", c.CapacityFactor))
	}
	return errors.Join(errs...)
}

// ModelConfig maps a Hugging Face Qwen2-MoE config to Trellis's MoE
// Llama, refusing — each with the field and the rule — what Trellis does
// not compute. num_experts = 0, or no sparse layer, is a dense Llama.
func (h Qwen2MoeConfig) ModelConfig() (model.Config, error) {
	c, errs := h.llama(qwenKVHeads, qwenTheta, qwenEps)
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("config.json: "+format, a...)) }
	if h.UseSlidingWindow {
		bad("use_sliding_window=true: Trellis's attention is causal over the whole sequence")
	}
	for i, t := range h.LayerTypes {
		if t != "full_attention" {
			bad("layer_types[%d]=%q: Trellis's attention is causal over the whole sequence (full_attention)", i, t)
			break
		}
	}
	if theta, err := ropeParameters(h.RopeParameters); err != nil {
		errs = append(errs, err)
	} else if theta > 0 {
		c.RopeTheta = theta
	}
	errs = append(errs, h.experts(&c)...)
	if err := c.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("config.json: %w", err))
	}
	return c, errors.Join(errs...)
}

// experts sets c's MoE keys from h (none when no layer is sparse).
func (h Qwen2MoeConfig) experts(c *model.Config) []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("config.json: "+format, a...)) }
	if h.NumExperts == nil {
		return []error{fmt.Errorf("config.json: num_experts is missing (a qwen2_moe config.json names its experts)")}
	}
	step := 1
	if h.DecoderSparseStep != nil {
		if step = *h.DecoderSparseStep; step <= 0 {
			return []error{fmt.Errorf("config.json: decoder_sparse_step=%d must be positive", step)}
		}
	}
	sparse := qwenSparse(c.Layers, *h.NumExperts, step, h.MLPOnlyLayers)
	first, every, ok := moePattern(sparse)
	switch {
	case *h.NumExperts < 0:
		return []error{fmt.Errorf("config.json: num_experts=%d must not be negative", *h.NumExperts)}
	case first == c.Layers:
		return nil // a dense model
	case !ok:
		return []error{fmt.Errorf("config.json: mlp_only_layers=%v, decoder_sparse_step=%d: the sparse layers %v are not Trellis's pattern (layer l ≥ dense_first with moe_every dividing l − dense_first)", h.MLPOnlyLayers, step, sparseList(sparse))}
	}
	for _, f := range []struct {
		name string
		v    *int
		dst  *int
	}{{"num_experts_per_tok", h.NumExpertsPerTok, &c.TopK}, {"moe_intermediate_size", h.MoEIntermediateSize, &c.ExpertFFN}} {
		if f.v == nil {
			bad("%s is missing (a qwen2_moe config.json with experts names it)", f.name)
			continue
		}
		*f.dst = *f.v
	}
	if c.ExpertFFN <= 0 && h.MoEIntermediateSize != nil {
		bad("moe_intermediate_size=%d must be positive", c.ExpertFFN)
	}
	if h.NormTopKProb {
		bad("norm_topk_prob=true: Trellis's softmax router gates by the chosen experts' probabilities without renormalising them over the k (norm_topk_prob=false)")
	}
	shared := qwenSharedFFN
	if h.SharedExpertIntermediateSize != nil {
		shared = *h.SharedExpertIntermediateSize
	}
	if shared != 0 {
		bad("shared_expert_intermediate_size=%d: Qwen2-MoE's shared expert is gated by sigmoid(x·shared_expert_gate), Trellis's shared experts are ungated (only 0, no shared expert, is read)", shared)
	}
	c.Experts, c.DenseFirst, c.MoEEvery, c.RouterScore = *h.NumExperts, first, every, "softmax"
	if h.OutputRouterLogits {
		c.AuxLoss = qwenAuxCoef
		if h.RouterAuxLossCoef != nil {
			c.AuxLoss = *h.RouterAuxLossCoef
		}
	}
	return errs
}

// qwenLayers are decoder_sparse_step and mlp_only_layers for c's MoE
// layers (l ≥ dense_first, moe_every dividing l − dense_first): when
// dense_first + 1 ≡ 0 (mod moe_every), step moe_every and the leading
// layers below dense_first that step would make sparse (the form Qwen's
// checkpoints use and the planner reads); otherwise step 1 and every
// dense layer listed.
func qwenLayers(c model.Config) (step int, only []int) {
	same := func(step int, only []int) bool {
		for l, s := range qwenSparse(c.Layers, c.Experts, step, only) {
			if s != c.MoELayer(l) {
				return false
			}
		}
		return true
	}
	m, n := max(1, c.MoEEvery), 0
	for i := 0; i < c.DenseFirst; i++ {
		if (i+1)%m == 0 {
			n = i + 1
		}
	}
	only = []int{}
	for i := 0; i < n; i++ {
		only = append(only, i)
	}
	if same(m, only) {
		return m, only
	}
	only = []int{}
	for l := 0; l < c.Layers; l++ {
		if !c.MoELayer(l) {
			only = append(only, l)
		}
	}
	return 1, only
}

// ropeParameters reads transformers 5's rope_parameters: only the default
// RoPE; its rope_theta (0 when absent).
func ropeParameters(raw json.RawMessage) (float64, error) {
	if s := bytes.TrimSpace(raw); len(s) == 0 || string(s) == "null" {
		return 0, nil
	}
	var p struct {
		RopeType  string   `json:"rope_type"`
		Type      string   `json:"type"`
		RopeTheta *float64 `json:"rope_theta"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return 0, fmt.Errorf("config.json: rope_parameters: %w", err)
	}
	if t := p.RopeType + p.Type; t != "" && t != "default" {
		return 0, fmt.Errorf("config.json: rope_parameters.rope_type=%q: Trellis computes the default RoPE only", t)
	}
	if p.RopeTheta == nil {
		return 0, nil
	}
	return *p.RopeTheta, nil
}

// qwenSparse says which of L layers Qwen2MoeDecoderLayer makes sparse:
// layer i when num_experts > 0, i ∉ mlp_only_layers and
// (i+1) % decoder_sparse_step = 0.
func qwenSparse(L, experts, step int, only []int) []bool {
	s := make([]bool, L)
	for i := range s {
		s[i] = experts > 0 && (i+1)%step == 0
	}
	for _, i := range only {
		if i >= 0 && i < L {
			s[i] = false
		}
	}
	return s
}

// moePattern finds Trellis's dense_first and moe_every that make exactly
// the sparse layers MoE layers (first = len(sparse) when none is); ok is
// false when no pair does.
func moePattern(sparse []bool) (first, every int, ok bool) {
	idx := sparseList(sparse)
	L := len(sparse)
	switch len(idx) {
	case 0:
		return L, 1, true
	case 1:
		first, every = idx[0], max(1, L-idx[0])
	default:
		first, every = idx[0], idx[1]-idx[0]
	}
	for i, s := range sparse {
		if (i >= first && (i-first)%every == 0) != s {
			return first, every, false
		}
	}
	return first, every, true
}

func sparseList(sparse []bool) []int {
	idx := []int{}
	for i, s := range sparse {
		if s {
			idx = append(idx, i)
		}
	}
	return idx
}

// parseQwen2Moe decodes a qwen2_moe config.json (unknown fields allowed).
func parseQwen2Moe(b []byte) (Qwen2MoeConfig, error) {
	var h Qwen2MoeConfig
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&h); err != nil {
		return h, fmt.Errorf("config.json: %w", err)
	}
	return h, nil
}
