package plan

import "fmt"

// MoE describes the routed experts of a Mixture-of-Experts model (Experts
// = 0: a dense model). An MoE layer replaces the dense MLP with a router
// (a linear map h → E scoring every expert for every token), E routed
// experts of which each token uses k, and optionally shared experts that
// every token passes through:
//
//	y = Σ_{i ∈ topk(router(x))} g_i(x) · FFN_i(x) + FFN_shared(x)
//
// Every expert is a gated (SwiGLU) MLP: gate and up h → f_e, down f_e → h.
type MoE struct {
	Experts int // E, routed experts per MoE layer
	TopK    int // k, experts each token is routed to
	FFN     int // f_e, one routed expert's inner width (moe_intermediate_size)
	// SharedFFN is the total inner width of the shared experts
	// (n_shared_experts · f_e for DeepSeek; 0: none).
	SharedFFN int
	// DenseFirst leading layers keep a dense MLP of width Model.FFN
	// (DeepSeek's first_k_dense_replace); of the rest, layer i is an MoE
	// layer when i % Every == Phase (Every 0 or 1: every layer).
	DenseFirst   int
	Every, Phase int
	// CapacityFactor c > 0 drops tokens beyond c·k·T/E per expert and pads
	// every expert to that capacity (GShard; Megatron's
	// --moe-expert-capacity-factor with --moe-pad-expert-input-to-capacity);
	// 0 is dropless routing.
	CapacityFactor float64
	// Score is the router's scoring: "softmax" (Mixtral, Qwen) or
	// "sigmoid" (DeepSeek-V3).
	Score string
	// RouterBias: a learned bias on the router's linear layer (GPT-OSS's
	// router.bias): E trained parameters a layer.
	RouterBias bool
	// SelectionBias: DeepSeek-V3's auxiliary-loss-free balancing
	// (e_score_correction_bias, topk_method noaux_tc; Megatron-Core's
	// --moe-router-enable-expert-bias): a per-expert bias added to the
	// scores for the top-k selection alone and moved after each step by
	// the experts' loads, not by a gradient: E fp32 buffers a layer, no
	// parameters, gradients or optimizer state.
	SelectionBias bool
	// ExpertBias: biases on the experts' linear layers (GPT-OSS).
	ExpertBias bool
	// SharedGate: a sigmoid gate h → 1 on the shared expert's output
	// (Qwen2-MoE).
	SharedGate bool
	// Group-limited routing: the experts form Groups equal groups and each
	// token picks its k experts from at most GroupTopK of them (DeepSeek's
	// n_group, topk_group). With the groups laid out one per node of the
	// expert-parallel group this is node-limited routing: a token reaches
	// at most GroupTopK nodes (DeepSeek-V3: 8 groups, 4).
	Groups, GroupTopK int
}

// MLA is DeepSeek's multi-head latent attention (KVRank = 0: not used).
// Queries are projected h → q_r (QRank, 0: directly h → a·(d_n + d_r)),
// normalised and expanded to a heads of d_n + d_r; keys and values share a
// compressed latent h → kv_r plus a d_r-wide rotary key shared by all heads,
// normalised and expanded to a·(d_n + d_v); the output projection is a·d_v
// → h.
type MLA struct {
	QRank, KVRank int // q_lora_rank, kv_lora_rank
	QKNope        int // d_n, the non-rotary part of a query/key head
	QKRope        int // d_r, the rotary part (one key head shared by all heads)
	V             int // d_v, a value head
}

// moe reports a model with routed experts.
func (m Model) moe() bool { return m.MoE != nil && m.MoE.Experts > 0 }

// experts is the model's MoE fields (zero for a dense model).
func (m Model) experts() MoE {
	if m.MoE == nil {
		return MoE{}
	}
	return *m.MoE
}

// latent is the model's MLA fields (zero without MLA).
func (m Model) latent() MLA {
	if m.MLA == nil {
		return MLA{}
	}
	return *m.MLA
}

// mla reports multi-head latent attention.
func (m Model) mla() bool { return m.MLA != nil && m.MLA.KVRank > 0 }

// general reports a model the dense per-layer formulas do not describe
// (experts, MLA, per-head query/key norms, sliding windows, MTP): its costs
// come from the per-kind layer recipes (recipe.go).
func (m Model) general() bool {
	return m.moe() || m.mla() || m.QKNorm || m.Window > 0 || m.MTP > 0
}

// moeLayer reports whether layer i (0-based) has routed experts.
func (m Model) moeLayer(i int) bool {
	if !m.moe() || i < m.MoE.DenseFirst {
		return false
	}
	every := max(1, m.MoE.Every)
	return i%every == m.MoE.Phase%every
}

// moeLayersIn counts the MoE layers among layers [from, from+n).
func (m Model) moeLayersIn(from, n int) int {
	c := 0
	for i := from; i < from+n; i++ {
		if m.moeLayer(i) {
			c++
		}
	}
	return c
}

// MoELayers counts the layers with routed experts.
func (m Model) MoELayers() int { return m.moeLayersIn(0, m.Layers) }

// windowLayer reports whether layer i uses sliding-window attention: with
// Window > 0, every layer i with i % 2 == 0 (GPT-OSS alternates sliding and
// full attention, starting with a sliding layer).
func (m Model) windowLayer(i int) bool { return m.Window > 0 && i%2 == 0 }

// validateGeneral checks the fields of the general models.
func (m Model) validateGeneral() error {
	e := m.experts()
	if m.moe() {
		pos := map[string]int{"moe.top_k": e.TopK, "moe.ffn": e.FFN}
		for _, k := range sortedKeys(pos) {
			if pos[k] < 1 {
				return fmt.Errorf("plan: model %s: %s=%d: must be at least 1", m.Name, k, pos[k])
			}
		}
		switch {
		case e.TopK > e.Experts:
			return fmt.Errorf("plan: model %s: moe.top_k=%d exceeds moe.experts=%d", m.Name, e.TopK, e.Experts)
		case e.SharedFFN < 0 || e.DenseFirst < 0 || e.Every < 0 || e.Phase < 0:
			return fmt.Errorf("plan: model %s: moe.shared_ffn=%d, dense_first=%d, every=%d, phase=%d: must not be negative", m.Name, e.SharedFFN, e.DenseFirst, e.Every, e.Phase)
		case e.DenseFirst > m.Layers:
			return fmt.Errorf("plan: model %s: moe.dense_first=%d exceeds layers=%d", m.Name, e.DenseFirst, m.Layers)
		case !(e.CapacityFactor >= 0) || e.CapacityFactor > 1e3:
			return fmt.Errorf("plan: model %s: moe.capacity_factor=%g: want 0 (dropless) or a positive factor up to 1000", m.Name, e.CapacityFactor)
		case e.Score != "" && e.Score != "softmax" && e.Score != "sigmoid":
			return fmt.Errorf("plan: model %s: moe.score=%q: want softmax or sigmoid", m.Name, e.Score)
		case e.Groups < 0 || e.GroupTopK < 0 || (e.Groups > 0 && (e.Experts%e.Groups != 0 || e.GroupTopK < 1 || e.GroupTopK > e.Groups)):
			return fmt.Errorf("plan: model %s: moe.groups=%d, group_top_k=%d: the groups must divide experts=%d and 1 ≤ group_top_k ≤ groups", m.Name, e.Groups, e.GroupTopK, e.Experts)
		case m.Family != Llama:
			return fmt.Errorf("plan: model %s: experts need the llama family (gated MLPs, RMSNorm)", m.Name)
		}
	} else if e != (MoE{}) {
		return fmt.Errorf("plan: model %s: moe fields set with moe.experts=0", m.Name)
	}
	if m.mla() {
		a := m.latent()
		switch {
		case a.QRank < 0 || a.QKNope < 0 || a.QKRope < 1 || a.V < 1 || a.QKNope+a.QKRope < 1:
			return fmt.Errorf("plan: model %s: mla q_rank=%d, qk_nope=%d, qk_rope=%d, v=%d: want qk_rope, v ≥ 1 and q_rank, qk_nope ≥ 0", m.Name, a.QRank, a.QKNope, a.QKRope, a.V)
		case m.KVHeads != m.Heads:
			return fmt.Errorf("plan: model %s: mla needs kv_heads=heads (got %d of %d): every head has its own keys and values", m.Name, m.KVHeads, m.Heads)
		case m.Family != Llama:
			return fmt.Errorf("plan: model %s: mla needs the llama family", m.Name)
		}
	}
	if m.Window < 0 || m.MTP < 0 || m.MTP > 8 {
		return fmt.Errorf("plan: model %s: window=%d, mtp=%d: want window ≥ 0 and 0 ≤ mtp ≤ 8", m.Name, m.Window, m.MTP)
	}
	return nil
}

// Attention parameters of one layer.
//
//	grouped-query: q h·a·d, k and v h·kv·d each, output a·d·h
//	               (+ biases (a + 2kv)·d + h, + per-head q/k norms 2d,
//	               + GPT-OSS's attention sinks a)
//	MLA:           q: h·q_r + q_r (norm) + q_r·a·(d_n+d_r), or h·a·(d_n+d_r)
//	               kv: h·(kv_r + d_r) + kv_r (norm) + kv_r·a·(d_n + d_v)
//	               output a·d_v·h
func (m Model) attnParams() int64 {
	h, a := int64(m.Hidden), int64(m.Heads)
	if m.mla() {
		x := m.latent()
		q := h * a * int64(x.QKNope+x.QKRope)
		if x.QRank > 0 {
			r := int64(x.QRank)
			q = h*r + r + r*a*int64(x.QKNope+x.QKRope)
		}
		kvr := int64(x.KVRank)
		kv := h*(kvr+int64(x.QKRope)) + kvr + kvr*a*int64(x.QKNope+x.V)
		return q + kv + a*int64(x.V)*h
	}
	d, kv := int64(m.HD()), int64(m.KVHeads)
	n := 2*h*a*d + 2*h*kv*d
	if m.AttnBias {
		n += (a+2*kv)*d + h
	}
	if m.QKNorm {
		n += 2 * d
	}
	if m.Sinks {
		n += a
	}
	return n
}

// mlpParams is an MLP of width f (gated: gate, up, down; GELU: up,
// down), with biases when the model has MLP biases.
func (m Model) mlpParams(f int) int64 {
	h, ff := int64(m.Hidden), int64(f)
	in := int64(1)
	if m.gated() {
		in = 2
	}
	n := (in + 1) * h * ff
	if m.MLPBias {
		n += in*ff + h
	}
	return n
}

// expertParams is one routed expert: a gated MLP of width f_e, with
// biases 2·f_e + h under ExpertBias.
func (m Model) expertParams() int64 {
	e := m.experts()
	h, f := int64(m.Hidden), int64(e.FFN)
	n := 3 * h * f
	if e.ExpertBias {
		n += 2*f + h
	}
	return n
}

// moeSharedParams are an MoE layer's parameters outside the routed
// experts' MLPs: the router E·h (+ E bias), the shared experts and their
// gate.
func (m Model) moeSharedParams() int64 {
	e := m.experts()
	h := int64(m.Hidden)
	n := int64(e.Experts) * h
	if e.RouterBias {
		n += int64(e.Experts)
	}
	if e.SharedFFN > 0 {
		n += m.mlpParams(e.SharedFFN)
		if e.SharedGate {
			n += h
		}
	}
	return n
}

// generalLayerParams counts layer i's parameters: attention, the two
// RMSNorms, and a dense MLP of width FFN or the MoE block.
func (m Model) generalLayerParams(i int) int64 {
	n := m.attnParams() + 2*m.normParams()
	if m.moeLayer(i) {
		return n + m.moeSharedParams() + int64(m.MoE.Experts)*m.expertParams()
	}
	return n + m.mlpParams(m.FFN)
}

// MTPParams counts the multi-token-prediction modules' own parameters
// (DeepSeek-V3): each has two input norms, a projection 2h → h, one
// transformer layer of the model's last kind and a final norm; the
// embedding and output layer are the model's, shared. Params leaves them
// out, as the published counts do (DeepSeek-V3's 671B; 685B with them and
// their stored copies of the embedding and output layer).
func (m Model) MTPParams() int64 {
	if m.MTP == 0 {
		return 0
	}
	h := int64(m.Hidden)
	one := 3*m.normParams() + 2*h*h + m.generalLayerParams(m.Layers-1)
	return int64(m.MTP) * one
}

// ActiveParams counts the parameters one token uses: every layer's
// attention and norms, the dense MLPs, and of an MoE layer the router, the
// shared experts and k routed experts; plus the embedding and the output
// layer (the convention of Mixtral's 12.9B and Qwen3's 3.3B and 22B).
func (m Model) ActiveParams() int64 {
	if !m.general() {
		return m.Params()
	}
	n := m.EmbeddingParams() + m.HeadParams()
	for i := 0; i < m.Layers; i++ {
		l := m.attnParams() + 2*m.normParams()
		if m.moeLayer(i) {
			l += m.moeSharedParams() + int64(m.MoE.TopK)*m.expertParams()
		} else {
			l += m.mlpParams(m.FFN)
		}
		n += l
	}
	return n
}
