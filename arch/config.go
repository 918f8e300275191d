// Package arch describes the architectures the engine trains as pure data:
// the model configuration (the [model] section of a job), the parameter
// tensors of every unit with their placement on the tensor-parallel axis,
// the layers of a block with the activations each keeps for its backward
// pass, and the order in which a pass asks for the units' weights. The
// engine (package model) builds its parameter layout, its stash and its
// passes from these declarations, and the planner (package plan) computes
// the engine's activation memory from the same ones, so the two cannot
// drift. It depends on nothing in the module.
//
// GPT-2 (pre-LN, as Radford et al. 2019): for tokens x (B,T)
//
//	h₀ = drop(wte[x] + wpe[0:T])
//	for l = 1..L:
//	    h = h + drop(Attn(LN₁(h)))        causal multi-head self-attention
//	    h = h + drop(MLP(LN₂(h)))         MLP(z) = W₂·GELU(W₁·z + b₁) + b₂, W₁ (4C,C)
//	logits = LN_f(h)·wteᵀ                 the LM head is tied to the token embedding
//	loss   = mean over tokens of cross-entropy(logits, targets)
//
// Llama (Touvron et al. 2023; Hugging Face's LlamaForCausalLM), arch =
// "llama": for tokens x (B,T), NH query heads of HS = C/NH channels
// sharing NKV key/value heads (grouped-query attention, Ainslie et al.
// 2023: query head h reads key/value head ⌊h·NKV/NH⌋)
//
//	h₀ = drop(embed[x])
//	for l = 1..L:
//	    h = h + drop(Attn(RMS₁(h)))        q, k rotated by RoPE (Su et al. 2021) before q·kᵀ
//	    h = h + drop(SwiGLU(RMS₂(h)))      SwiGLU(z) = W_down·(SiLU(W_gate·z) ⊙ W_up·z), F wide
//	logits = RMS_f(h)·W_headᵀ              untied (W_head = embed with tie_embeddings)
//
// with no biases, RMSNorm(x) = x/√(mean(x²) + ε)·w, and RoPE rotating
// the channel pairs (i, i+HS/2) of every q and k head at position p by
// the angle p·θ^(−2i/HS) (Hugging Face's rotate_half convention). Dropout
// (Trellis's extension: Llama has none) sits where GPT-2's does.
package arch

import (
	"errors"
	"fmt"
	"math"

	"trellis/internal/checked"
)

// The architectures (Config.Arch).
const (
	GPT2  = "gpt2"
	Llama = "llama"
)

// Config is the [model] section of a job file.
type Config struct {
	// Arch is the architecture: "gpt2" (the default, also "") or "llama".
	Arch    string  `toml:"arch" json:"arch,omitempty"`
	Layers  int     `toml:"layers" json:"layers"`   // L, transformer blocks
	Hidden  int     `toml:"hidden" json:"hidden"`   // C, the model width
	Heads   int     `toml:"heads" json:"heads"`     // NH, attention heads; C/NH is the head size
	SeqLen  int     `toml:"seq_len" json:"seq_len"` // T, the context length
	Vocab   int     `toml:"vocab" json:"vocab"`     // V, the vocabulary size
	Dropout float64 `toml:"dropout" json:"dropout"` // probability in [0, 1); 0 disables dropout
	// Init, if set, is a Hugging Face GPT-2 model (its directory, or its
	// model.safetensors with config.json beside it) whose weights a new run
	// starts from instead of GPT-2's random initialisation (fine-tuning).
	// Its shape must be this config's.
	Init string `toml:"init" json:"init,omitempty"`

	// The Llama family's keys (arch = "llama"; GPT-2 has none of them).
	// KVHeads is NKV, the key/value heads (0: = heads, multi-head
	// attention; 1: multi-query attention); it divides heads.
	KVHeads int `toml:"kv_heads" json:"kv_heads,omitempty"`
	// FFN is F, the SwiGLU width (0: Llama's rule, 8C/3 rounded up to a
	// multiple of 256).
	FFN int `toml:"ffn_hidden" json:"ffn_hidden,omitempty"`
	// RopeTheta is RoPE's base θ (0: 10000).
	RopeTheta float64 `toml:"rope_theta" json:"rope_theta,omitempty"`
	// NormEps is RMSNorm's ε (0: 1e-5, Llama 2 and 3's).
	NormEps float64 `toml:"norm_eps" json:"norm_eps,omitempty"`
	// TieEmbeddings ties the LM head to the token embedding (GPT-2's is
	// always tied; Llama's is its own unless this is set).
	TieEmbeddings bool `toml:"tie_embeddings" json:"tie_embeddings,omitempty"`

	// Mixture of experts (a Llama's; moe.go). Experts is E, the routed
	// experts of an MoE layer (0: a dense model); TopK is k, the experts
	// each token uses; ExpertFFN is F_e, an expert's SwiGLU width (0:
	// ffn_hidden); SharedExperts experts of width F_e every token passes
	// through; layer l ≥ DenseFirst is an MoE layer when MoEEvery (0: 1)
	// divides l − DenseFirst; CapacityFactor c > 0 caps an expert at
	// ⌈c·n·k/E⌉ of a micro-batch's n tokens (0: dropless); RouterScore is
	// the router's scoring ("softmax", the default); AuxLoss is the
	// load-balancing loss's coefficient α. RouterExpertBias turns on
	// DeepSeek-V3's auxiliary-loss-free balancing (a per-expert selection
	// bias, moe.go), RouterBiasUpdateRate its step u (0: 1e-3), as
	// Megatron-Core's moe_router_enable_expert_bias and
	// moe_router_bias_update_rate.
	Experts        int     `toml:"experts" json:"experts,omitempty"`
	TopK           int     `toml:"top_k" json:"top_k,omitempty"`
	ExpertFFN      int     `toml:"expert_ffn_hidden" json:"expert_ffn_hidden,omitempty"`
	SharedExperts  int     `toml:"shared_experts" json:"shared_experts,omitempty"`
	MoEEvery       int     `toml:"moe_every" json:"moe_every,omitempty"`
	DenseFirst     int     `toml:"dense_first" json:"dense_first,omitempty"`
	CapacityFactor float64 `toml:"capacity_factor" json:"capacity_factor,omitempty"`
	RouterScore    string  `toml:"router_score" json:"router_score,omitempty"`
	AuxLoss        float64 `toml:"aux_loss" json:"aux_loss,omitempty"`

	RouterExpertBias     bool    `toml:"router_expert_bias" json:"router_expert_bias,omitempty"`
	RouterBiasUpdateRate float64 `toml:"router_bias_update_rate" json:"router_bias_update_rate,omitempty"`
}

// Defaults of the Llama keys.
const (
	DefaultRopeTheta = 10000
	DefaultNormEps   = 1e-5
)

// IsLlama says whether the architecture is Llama's.
func (c Config) IsLlama() bool { return c.Arch == Llama }

// ArchName is the architecture's name, "gpt2" for the default.
func (c Config) ArchName() string {
	if c.Arch == "" {
		return GPT2
	}
	return c.Arch
}

// KV is NKV, the key/value heads: kv_heads, or heads (GPT-2 and kv_heads = 0).
func (c Config) KV() int {
	if c.IsLlama() && c.KVHeads > 0 {
		return c.KVHeads
	}
	return c.Heads
}

// HeadSize is HS = C/NH.
func (c Config) HeadSize() int {
	if c.Heads <= 0 {
		return 0
	}
	return c.Hidden / c.Heads
}

// FFNWidth is the MLP's inner width: GPT-2's 4C, or Llama's F (ffn_hidden,
// or 256·⌈⌊8C/3⌋/256⌉ when 0, the rule of Llama's reference code).
func (c Config) FFNWidth() int {
	if !c.IsLlama() {
		return 4 * c.Hidden
	}
	if c.FFN > 0 {
		return c.FFN
	}
	f := 2 * 4 * c.Hidden / 3
	return (f + 255) / 256 * 256
}

// Tied says whether the LM head is the token embedding (unit 0).
func (c Config) Tied() bool { return !c.IsLlama() || c.TieEmbeddings }

// Theta is RoPE's base θ.
func (c Config) Theta() float64 {
	if c.RopeTheta > 0 {
		return c.RopeTheta
	}
	return DefaultRopeTheta
}

// Eps is RMSNorm's ε.
func (c Config) Eps() float64 {
	if c.NormEps > 0 {
		return c.NormEps
	}
	return DefaultNormEps
}

// Canonical is c with every default spelled out (a Llama's kv_heads,
// ffn_hidden, rope_theta, norm_eps; GPT-2's arch as ""), so that two
// configurations of the same model compare equal.
func (c Config) Canonical() Config {
	if !c.IsLlama() {
		c.Arch = ""
		return c
	}
	c.KVHeads, c.FFN, c.RopeTheta, c.NormEps = c.KV(), c.FFNWidth(), c.Theta(), c.Eps()
	if c.Experts > 0 {
		c.ExpertFFN, c.MoEEvery = c.ExpertWidth(), max(1, c.MoEEvery)
		if c.RouterScore == "" {
			c.RouterScore = "softmax"
		}
		if c.RouterExpertBias {
			c.RouterBiasUpdateRate = c.BiasRate()
		}
	}
	return c
}

// Validate names the first field that breaks a rule.
func (c Config) Validate() error {
	var errs []error
	pos := []struct {
		name string
		v    int
	}{{"layers", c.Layers}, {"hidden", c.Hidden}, {"heads", c.Heads}, {"seq_len", c.SeqLen}, {"vocab", c.Vocab}}
	for _, f := range pos {
		if f.v <= 0 {
			errs = append(errs, fmt.Errorf("model.%s=%d must be positive", f.name, f.v))
		}
	}
	if c.Heads > 0 && c.Hidden > 0 && c.Hidden%c.Heads != 0 {
		errs = append(errs, fmt.Errorf("model.heads=%d does not divide model.hidden=%d", c.Heads, c.Hidden))
	}
	if !(c.Dropout >= 0 && c.Dropout < 1) {
		errs = append(errs, fmt.Errorf("model.dropout=%v must be in [0, 1)", c.Dropout))
	}
	switch c.Arch {
	case "", GPT2:
		errs = append(errs, c.gpt2Keys()...)
	case Llama:
		errs = append(errs, c.llamaKeys()...)
	default:
		errs = append(errs, fmt.Errorf("model.arch=%q: want gpt2 or llama", c.Arch))
	}
	errs = append(errs, c.moeKeys()...)
	if len(errs) == 0 {
		if _, ok := c.numParams(); !ok {
			errs = append(errs, fmt.Errorf("model: %v has more parameters than a 64-bit count holds (%s %v)", c, c.paramFormula(), checked.ErrOverflow))
		}
	}
	return errors.Join(errs...)
}

// gpt2Keys refuses the Llama family's keys on a GPT-2, whose values are
// fixed: one key/value head per head, a 4C MLP, learned positions,
// LayerNorm's ε = 1e-5. (tie_embeddings is Llama's alone: GPT-2's head
// is always tied.)
func (c Config) gpt2Keys() []error {
	var errs []error
	if c.KVHeads != 0 && c.KVHeads != c.Heads {
		errs = append(errs, fmt.Errorf("model.kv_heads=%d: arch=gpt2 has one key/value head per head (set model.arch=\"llama\" for grouped-query attention)", c.KVHeads))
	}
	if c.FFN != 0 && c.FFN != 4*c.Hidden {
		errs = append(errs, fmt.Errorf("model.ffn_hidden=%d: arch=gpt2's MLP is 4·model.hidden=%d wide", c.FFN, 4*c.Hidden))
	}
	if c.RopeTheta != 0 {
		errs = append(errs, fmt.Errorf("model.rope_theta=%g: arch=gpt2 has learned positions, not RoPE", c.RopeTheta))
	}
	if c.NormEps != 0 && c.NormEps != 1e-5 {
		errs = append(errs, fmt.Errorf("model.norm_eps=%g: arch=gpt2's LayerNorm uses ε=1e-5", c.NormEps))
	}
	return errs
}

// llamaKeys checks the Llama family's keys: kv_heads divides heads, the
// head size is even (RoPE rotates channel pairs), the sizes are
// non-negative and θ, ε finite.
func (c Config) llamaKeys() []error {
	var errs []error
	switch {
	case c.KVHeads < 0:
		errs = append(errs, fmt.Errorf("model.kv_heads=%d must be positive (or 0: = model.heads)", c.KVHeads))
	case c.KVHeads > 0 && c.Heads > 0 && c.Heads%c.KVHeads != 0:
		errs = append(errs, fmt.Errorf("model.kv_heads=%d does not divide model.heads=%d", c.KVHeads, c.Heads))
	}
	if c.FFN < 0 {
		errs = append(errs, fmt.Errorf("model.ffn_hidden=%d must be positive (or 0: Llama's rule from model.hidden)", c.FFN))
	}
	if c.Heads > 0 && c.Hidden > 0 && c.Hidden%c.Heads == 0 && (c.Hidden/c.Heads)%2 != 0 {
		errs = append(errs, fmt.Errorf("model.hidden/model.heads=%d must be even: RoPE rotates pairs of a head's channels", c.Hidden/c.Heads))
	}
	if !(c.RopeTheta >= 0 && c.RopeTheta <= math.MaxFloat32) || (c.RopeTheta > 0 && c.RopeTheta <= 1) {
		errs = append(errs, fmt.Errorf("model.rope_theta=%v must be above 1 (or 0: %d)", c.RopeTheta, DefaultRopeTheta))
	}
	if !(c.NormEps >= 0 && c.NormEps < 1) {
		errs = append(errs, fmt.Errorf("model.norm_eps=%v must be in [0, 1) (0: %g)", c.NormEps, DefaultNormEps))
	}
	return errs
}

// String names every field, for messages: "layers=4 hidden=256 heads=4
// seq_len=128 vocab=256 dropout=0" (a Llama's adds its keys).
func (c Config) String() string {
	s := fmt.Sprintf("layers=%d hidden=%d heads=%d seq_len=%d vocab=%d dropout=%g",
		c.Layers, c.Hidden, c.Heads, c.SeqLen, c.Vocab, c.Dropout)
	if !c.IsLlama() {
		return s
	}
	s = fmt.Sprintf("arch=llama %s kv_heads=%d ffn_hidden=%d rope_theta=%g norm_eps=%g tie_embeddings=%v",
		s, c.KV(), c.FFNWidth(), c.Theta(), c.Eps(), c.TieEmbeddings)
	if c.Experts > 0 {
		s += fmt.Sprintf(" experts=%d top_k=%d expert_ffn_hidden=%d shared_experts=%d moe_every=%d dense_first=%d capacity_factor=%g aux_loss=%g",
			c.Experts, c.TopK, c.ExpertWidth(), c.SharedExperts, max(1, c.MoEEvery), c.DenseFirst, c.CapacityFactor, c.AuxLoss)
		if c.RouterExpertBias {
			s += fmt.Sprintf(" router_expert_bias=true router_bias_update_rate=%g", c.BiasRate())
		}
	}
	return s
}

// paramTerms are NumParams' terms, each a product of sizes: GPT-2's
// V·C + T·C + 2C + L·(12C² + 13C), Llama's
// V·C (+ V·C untied) + C + L·(2C + C·(NH+2·NKV)·HS + NH·HS·C + 3·C·F).
func (c Config) paramTerms() [][]int64 {
	C, L, V := int64(c.Hidden), int64(c.Layers), int64(c.Vocab)
	if !c.IsLlama() {
		return [][]int64{{V, C}, {int64(c.SeqLen), C}, {2, C}, {L, 12, C, C}, {L, 13, C}}
	}
	HS, NH, KV, F := int64(c.HeadSize()), int64(c.Heads), int64(c.KV()), int64(c.FFNWidth())
	Lm := int64(c.MoELayers(0, c.Layers))
	t := [][]int64{{V, C}, {C}, {L, 2, C}, {L, C, NH + 2*KV, HS}, {L, NH, HS, C}, {L - Lm, 3, C, F}}
	if Lm > 0 {
		E, Fe, Fs := int64(c.Experts), int64(c.ExpertWidth()), int64(c.SharedWidth())
		t = append(t, []int64{Lm, E, C}, []int64{Lm, E, 3, C, Fe}, []int64{Lm, 3, C, Fs})
	}
	if !c.Tied() {
		t = append(t, []int64{V, C})
	}
	return t
}

// paramFormula is NumParams' formula, for messages.
func (c Config) paramFormula() string {
	if !c.IsLlama() {
		return "V·C + T·C + L·(12C²+13C) + 2C"
	}
	if c.Experts > 0 {
		return "V·C (twice untied) + C + L·(2C + C·(NH+2·NKV)·HS + NH·HS·C) + L_dense·3·C·F + L_moe·(E·C + 3·E·C·F_e + 3·C·F_s)"
	}
	return "V·C (twice untied) + C + L·(2C + C·(NH+2·NKV)·HS + NH·HS·C + 3·C·F)"
}

// numParams is NumParams with every product and sum checked; ok is false
// when the count does not fit an int.
func (c Config) numParams() (int, bool) {
	var sum int64
	for _, t := range c.paramTerms() {
		p, ok := checked.Product(t...)
		if !ok {
			return 0, false
		}
		if sum, ok = checked.Add(sum, p); !ok {
			return 0, false
		}
	}
	if int64(int(sum)) != sum {
		return 0, false
	}
	return int(sum), true
}

// blockParams is the number of parameters of one GPT-2 block:
// two LayerNorms (4C), QKV (3C·C + 3C), attention projection (C·C + C),
// MLP up (4C·C + 4C) and down (C·4C + C) = 12C² + 13C.
func blockParams(C int) int { return 12*C*C + 13*C }

// NumParams is the number of parameters. GPT-2's is V·C + T·C +
// L·(12C² + 13C) + 2C (the LM head shares wte): GPT-2 124M (L=12, C=768,
// T=1024, V=50257) has 124,439,808. Llama's is V·C (twice when untied) +
// C + L·(2C + C·(NH + 2·NKV)·HS + NH·HS·C + 3·C·F): Llama 3 8B has
// 8,030,261,248.
func (c Config) NumParams() int {
	var n int
	for _, t := range c.paramTerms() {
		p := 1
		for _, x := range t {
			p *= int(x)
		}
		n += p
	}
	return n
}

// FLOPsPerToken is the training cost of one token, forward and backward,
// in floating-point operations (a multiply-add counts 2):
//
//	6·N + 12·L·T·C            (C = NH·HS)
//
// 6·N: every parameter takes part in one multiply-add per token in the
// forward pass and two in the backward (the input and the weight
// gradients), N = NumParams() (GPT-2's embeddings are counted as if they
// were matmuls, which the tied LM head makes nearly true; an untied
// Llama's token embedding, a lookup, is left out of N: its head is
// counted). 12·L·T·C: attention's Q·Kᵀ and P·V cost 2·T·C each per
// token and layer in the forward pass, twice that in the backward,
// counted over the full T×T scores (the usual convention, as in PaLM and
// llm.c, although the causal mask lets kernels skip about half).
// An MoE model's N counts the parameters a token uses (moe.go: the
// router, its k experts and the shared ones, not all E).
// MFU = tokens/s · FLOPsPerToken / peak FLOP/s.
func (c Config) FLOPsPerToken() float64 {
	n := float64(c.NumParams())
	if !c.Tied() {
		n -= float64(c.Vocab) * float64(c.Hidden)
	}
	if lm := float64(c.MoELayers(0, c.Layers)); lm > 0 { // a token runs its k experts, not all E
		C, E, Fe, Fs := float64(c.Hidden), float64(c.Experts), float64(c.ExpertWidth()), float64(c.SharedWidth())
		n += lm * (c.moeActiveParams() - (E*C + 3*E*C*Fe + 3*C*Fs))
	}
	return 6*n + 12*float64(c.Layers)*float64(c.SeqLen)*float64(c.Hidden)
}
