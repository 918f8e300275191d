package plan

import (
	"fmt"
	"math"
)

// hfMoE holds the config.json fields of the Mixture-of-Experts and
// latent-attention families (Mixtral, Qwen2-MoE, Qwen3, Qwen3-MoE,
// DeepSeek-V2/V3, Kimi K2, GPT-OSS), as transformers names them.
type hfMoE struct {
	// routed experts
	NumLocalExperts *int     `json:"num_local_experts"` // mixtral, gpt_oss
	NumExperts      *int     `json:"num_experts"`       // qwen2_moe, qwen3_moe
	NRouted         *int     `json:"n_routed_experts"`  // deepseek
	TopK            *int     `json:"num_experts_per_tok"`
	ExpertsPerToken *int     `json:"experts_per_token"` // gpt_oss
	MoEFFN          *int     `json:"moe_intermediate_size"`
	SharedFFN       *int     `json:"shared_expert_intermediate_size"` // qwen2_moe
	NShared         *int     `json:"n_shared_experts"`                // deepseek
	SparseStep      *int     `json:"decoder_sparse_step"`             // qwen
	MLPOnly         []int    `json:"mlp_only_layers"`                 // qwen
	FirstDense      *int     `json:"first_k_dense_replace"`           // deepseek
	LayerFreq       *int     `json:"moe_layer_freq"`                  // deepseek
	Scoring         string   `json:"scoring_func"`                    // deepseek: softmax | sigmoid
	TopKMethod      string   `json:"topk_method"`                     // deepseek: greedy | group_limited_greedy | noaux_tc
	NGroup          *int     `json:"n_group"`
	TopKGroup       *int     `json:"topk_group"`
	NextN           *int     `json:"num_nextn_predict_layers"` // deepseek_v3
	Capacity        *float64 `json:"capacity_factor"`

	// multi-head latent attention
	QLoRA  *int `json:"q_lora_rank"`
	KVLoRA *int `json:"kv_lora_rank"`
	QKNope *int `json:"qk_nope_head_dim"`
	QKRope *int `json:"qk_rope_head_dim"`
	VHead  *int `json:"v_head_dim"`

	// attention windows (mixtral, gpt_oss)
	SlidingWindow *int     `json:"sliding_window"`
	LayerTypes    []string `json:"layer_types"`
}

// HFModelTypes lists the config.json model types ParseHFConfig reads.
func HFModelTypes() []string { return append([]string{"gpt2", "llama"}, hfMoETypes()...) }

// The model types ParseHFConfig reads with moeModel.
func hfMoETypes() []string {
	return []string{"mixtral", "qwen2_moe", "qwen3", "qwen3_moe", "deepseek_v2", "deepseek_v3", "kimi_k2", "gpt_oss"}
}

func firstInt(vs ...*int) *int {
	for _, v := range vs {
		if v != nil {
			return v
		}
	}
	return nil
}

// moeModel reads the families of hfMoETypes: the llama fields (hidden,
// layers, heads, kv heads, head_dim, intermediate_size for the dense
// layers, vocabulary, positions, ties, biases) and then each family's
// own. Defaults are transformers': Qwen's decoder_sparse_step 1, every
// DeepSeek layer from first_k_dense_replace (0) with moe_layer_freq 1,
// softmax scores.
func (c hfConfig) moeModel(name string) (Model, error) {
	m, err := c.llama(name)
	if err != nil {
		return m, err
	}
	var e MoE
	t := c.ModelType
	switch t {
	case "mixtral", "gpt_oss":
		if c.SlidingWindow != nil && t == "mixtral" {
			return m, fmt.Errorf("plan: config.json: sliding_window=%d: the planner models GPT-OSS's alternating windows, not a window on every layer", *c.SlidingWindow)
		}
		if e.Experts, err = need("num_local_experts", c.NumLocalExperts); err != nil {
			return m, err
		}
		if e.TopK, err = need("num_experts_per_tok", firstInt(c.TopK, c.ExpertsPerToken)); err != nil {
			return m, err
		}
		e.FFN, e.Score = m.FFN, "softmax"
		if t == "gpt_oss" {
			e.RouterBias, e.ExpertBias, m.Sinks = true, true, true
			m.AttnBias = c.AttnBias == nil || *c.AttnBias
			if err := c.gptOSSWindows(&m); err != nil {
				return m, err
			}
		}
	case "qwen2_moe", "qwen3_moe", "qwen3":
		m.QKNorm = t != "qwen2_moe"
		if t == "qwen2_moe" { // q, k and v have biases (the output's h is counted too)
			m.AttnBias = c.AttnBias == nil || *c.AttnBias
		}
		if t == "qwen3" {
			break
		}
		if e, err = c.qwenExperts(m); err != nil {
			return m, err
		}
	default: // deepseek_v2, deepseek_v3, kimi_k2
		if e, err = c.deepseekExperts(&m); err != nil {
			return m, err
		}
	}
	if c.Capacity != nil {
		if e.CapacityFactor = *c.Capacity; !(e.CapacityFactor >= 0) || math.IsInf(e.CapacityFactor, 0) {
			return m, fmt.Errorf("plan: config.json: capacity_factor=%g: want 0 or a positive factor", e.CapacityFactor)
		}
	}
	if e.Experts > 0 {
		if e.TopK > e.Experts {
			return m, fmt.Errorf("plan: config.json: num_experts_per_tok=%d exceeds the %d experts", e.TopK, e.Experts)
		}
		m.MoE = &e
	}
	return m, nil
}

// qwenExperts reads Qwen2-MoE's and Qwen3-MoE's experts: layer i is an
// MoE layer when (i+1) % decoder_sparse_step = 0 and i is not in
// mlp_only_layers (which the planner reads only as a run of leading layers).
func (c hfConfig) qwenExperts(m Model) (MoE, error) {
	e := MoE{Score: "softmax"}
	var err error
	if e.Experts, err = need("num_experts", c.NumExperts); err != nil {
		return e, err
	}
	if e.TopK, err = need("num_experts_per_tok", c.TopK); err != nil {
		return e, err
	}
	if e.FFN, err = need("moe_intermediate_size", c.MoEFFN); err != nil {
		return e, err
	}
	step, err := optional("decoder_sparse_step", c.SparseStep, 1)
	if err != nil {
		return e, err
	}
	if step > 1 { // every layer (1) is the zero value
		e.Every, e.Phase = step, step-1
	}
	for i, l := range c.MLPOnly {
		if l != i {
			return e, fmt.Errorf("plan: config.json: mlp_only_layers=%v: the planner models dense layers only as the first ones (0, 1, …)", c.MLPOnly)
		}
	}
	if e.DenseFirst = len(c.MLPOnly); e.DenseFirst > m.Layers {
		return e, fmt.Errorf("plan: config.json: mlp_only_layers has %d layers, the model %d", e.DenseFirst, m.Layers)
	}
	if c.SharedFFN != nil && *c.SharedFFN > 0 {
		if e.SharedFFN, err = bounded("shared_expert_intermediate_size", *c.SharedFFN); err != nil {
			return e, err
		}
		e.SharedGate = true
	}
	return e, nil
}

// deepseekExperts reads DeepSeek-V2/V3's (and Kimi K2's) experts and
// multi-head latent attention: layer i is an MoE layer when i ≥
// first_k_dense_replace and i % moe_layer_freq = 0; n_shared_experts
// shared experts of moe_intermediate_size; topk_method noaux_tc adds the
// router's e_score_correction_bias (SelectionBias: buffers, not
// parameters); n_group/topk_group limit the groups a
// token reaches.
func (c hfConfig) deepseekExperts(m *Model) (MoE, error) {
	e := MoE{Score: "softmax"}
	var err error
	if e.Experts, err = need("n_routed_experts", c.NRouted); err != nil {
		return e, err
	}
	if e.TopK, err = need("num_experts_per_tok", c.TopK); err != nil {
		return e, err
	}
	if e.FFN, err = need("moe_intermediate_size", c.MoEFFN); err != nil {
		return e, err
	}
	shared, err := optionalZero("n_shared_experts", c.NShared)
	if err != nil {
		return e, err
	}
	e.SharedFFN = shared * e.FFN
	if e.DenseFirst, err = optionalZero("first_k_dense_replace", c.FirstDense); err != nil {
		return e, err
	}
	if e.Every, err = optional("moe_layer_freq", c.LayerFreq, 1); err != nil {
		return e, err
	}
	if e.Every == 1 {
		e.Every = 0 // every layer: the zero value
	}
	switch c.Scoring {
	case "", "softmax":
	case "sigmoid":
		e.Score = "sigmoid"
	default:
		return e, fmt.Errorf("plan: config.json: scoring_func %q: want softmax or sigmoid", c.Scoring)
	}
	e.SelectionBias = c.TopKMethod == "noaux_tc"
	groups, err := optional("n_group", c.NGroup, 1)
	if err != nil {
		return e, err
	}
	if groups > 1 {
		e.Groups = groups
		if e.GroupTopK, err = optional("topk_group", c.TopKGroup, groups); err != nil {
			return e, err
		}
	}
	if m.MTP, err = optionalZero("num_nextn_predict_layers", c.NextN); err != nil {
		return e, err
	}
	a := &MLA{}
	m.MLA = a
	if a.KVRank, err = need("kv_lora_rank", c.KVLoRA); err != nil {
		return e, err
	}
	if a.QRank, err = optionalZero("q_lora_rank", c.QLoRA); err != nil {
		return e, err
	}
	for _, f := range []struct {
		name string
		v    *int
		dst  *int
	}{{"qk_nope_head_dim", c.QKNope, &a.QKNope}, {"qk_rope_head_dim", c.QKRope, &a.QKRope}, {"v_head_dim", c.VHead, &a.V}} {
		if *f.dst, err = need(f.name, f.v); err != nil {
			return e, err
		}
	}
	// MLA's heads are d_n + d_r wide for q·k and d_v for v, both given; the
	// head size only keeps validation whole when heads do not divide h.
	m.KVHeads, m.HeadDim = m.Heads, 0
	if m.Hidden%m.Heads != 0 {
		m.HeadDim = a.QKNope + a.QKRope
	}
	return e, nil
}

// gptOSSWindows reads GPT-OSS's sliding_window and layer_types, which must
// alternate sliding_attention and full_attention from the first layer.
func (c hfConfig) gptOSSWindows(m *Model) error {
	if c.SlidingWindow == nil {
		return nil
	}
	w, err := bounded("sliding_window", *c.SlidingWindow)
	if err != nil {
		return err
	}
	m.Window = w
	for i, lt := range c.LayerTypes {
		want := "full_attention"
		if m.windowLayer(i) {
			want = "sliding_attention"
		}
		if lt != want {
			return fmt.Errorf("plan: config.json: layer_types[%d]=%q: the planner models GPT-OSS's alternation (sliding_attention on even layers), which says %q", i, lt, want)
		}
	}
	return nil
}

// optionalZero reads a field that may be absent, null or 0 (then 0).
func optionalZero(field string, v *int) (int, error) {
	if v == nil || *v == 0 {
		return 0, nil
	}
	return bounded(field, *v)
}
