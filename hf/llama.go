package hf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"trellis/arch"
	"trellis/model"
)

// A Llama moves between Trellis and Hugging Face's LlamaForCausalLM
// under the same names, with a "model." prefix on everything but the
// head, and no transposition (both store torch.nn.Linear's (out, in)):
//
//	Trellis                                  Hugging Face (LlamaForCausalLM)
//	embed_tokens.weight (V,C)                model.embed_tokens.weight
//	layers.l.input_layernorm.weight (C)      model.layers.l.input_layernorm.weight
//	layers.l.self_attn.{q,k,v,o}_proj.weight model.layers.l.self_attn.{q,k,v,o}_proj.weight
//	layers.l.post_attention_layernorm.weight model.layers.l.post_attention_layernorm.weight
//	layers.l.mlp.{gate,up,down}_proj.weight  model.layers.l.mlp.{gate,up,down}_proj.weight
//	norm.weight (C)                          model.norm.weight
//	lm_head.weight (V,C) (untied)            lm_head.weight (tied: absent, or equal to the embedding)
//
// RoPE: Trellis rotates the channel pairs (i, i+HS/2) of every q and k
// head (ops.RoPEForward), Hugging Face's rotate_half convention, in which
// transformers stores q_proj and k_proj (its conversion of Meta's
// checkpoints permutes their rows from Meta's interleaved pairs (2i,
// 2i+1) into it). So q_proj and k_proj move unpermuted; a checkpoint in
// Meta's original layout must go through transformers' conversion first.

// LlamaPrefix is the module path LlamaForCausalLM gives the decoder's
// tensors (the head, lm_head, has none). Import also accepts names
// without it (LlamaModel checkpoints).
const LlamaPrefix = "model."

// llamaName is the Hugging Face name of a Trellis Llama tensor.
func llamaName(trellis string) string {
	if trellis == "lm_head.weight" {
		return trellis
	}
	return LlamaPrefix + trellis
}

// LlamaConfig is the part of a Hugging Face LlamaConfig (config.json) that
// decides the architecture. Fields Trellis cannot honour are refused by
// ModelConfig rather than silently ignored.
type LlamaConfig struct {
	Architectures         []string        `json:"architectures"`
	ModelType             string          `json:"model_type"`
	HiddenSize            int             `json:"hidden_size"`
	NumHiddenLayers       int             `json:"num_hidden_layers"`
	NumAttentionHeads     int             `json:"num_attention_heads"`
	NumKeyValueHeads      *int            `json:"num_key_value_heads,omitempty"`
	HeadDim               *int            `json:"head_dim,omitempty"`
	IntermediateSize      int             `json:"intermediate_size"`
	VocabSize             int             `json:"vocab_size"`
	MaxPositionEmbeddings int             `json:"max_position_embeddings"`
	RMSNormEps            *float64        `json:"rms_norm_eps,omitempty"`
	RopeTheta             *float64        `json:"rope_theta,omitempty"`
	RopeScaling           json.RawMessage `json:"rope_scaling,omitempty"`
	TieWordEmbeddings     *bool           `json:"tie_word_embeddings,omitempty"`
	HiddenAct             string          `json:"hidden_act,omitempty"`
	AttentionBias         bool            `json:"attention_bias"`
	MLPBias               bool            `json:"mlp_bias"`
	AttentionDropout      float64         `json:"attention_dropout"`
	PretrainingTP         int             `json:"pretraining_tp,omitempty"`
	InitializerRange      float64         `json:"initializer_range,omitempty"`
	TorchDType            string          `json:"torch_dtype,omitempty"`
}

// Hugging Face LlamaConfig's defaults for the fields a config.json may omit.
const (
	hfLlamaEps   = 1e-6
	hfLlamaTheta = 10000.0
)

// LlamaConfigOf is the config.json of a Trellis Llama: every field that
// decides the architecture is written, max_position_embeddings is the
// job's seq_len. Trellis's dropout (on the residual branches and the
// embedding) has no place in Hugging Face's Llama and is not written:
// attention_dropout is 0, as Trellis drops no attention probabilities.
func LlamaConfigOf(c model.Config, dtype string) LlamaConfig {
	kv, hd := c.KV(), c.HeadSize()
	eps, theta, tied := c.Eps(), c.Theta(), c.Tied()
	return LlamaConfig{
		Architectures: []string{"LlamaForCausalLM"}, ModelType: "llama",
		HiddenSize: c.Hidden, NumHiddenLayers: c.Layers, NumAttentionHeads: c.Heads, NumKeyValueHeads: &kv, HeadDim: &hd,
		IntermediateSize: c.FFNWidth(), VocabSize: c.Vocab, MaxPositionEmbeddings: c.SeqLen,
		RMSNormEps: &eps, RopeTheta: &theta, TieWordEmbeddings: &tied, HiddenAct: "silu",
		InitializerRange: model.InitStd, PretrainingTP: 1, TorchDType: dtype,
	}
}

// ModelConfig maps a Hugging Face Llama config to Trellis's, refusing —
// each with the field and the rule — what Trellis's Llama does not
// compute. seq_len is max_position_embeddings (a job may train shorter
// sequences).
func (h LlamaConfig) ModelConfig() (model.Config, error) {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("config.json: "+format, a...)) }
	if act := h.HiddenAct; act != "" && act != "silu" {
		bad("hidden_act=%q: Trellis's Llama computes SwiGLU with silu", act)
	}
	if h.AttentionBias || h.MLPBias {
		bad("attention_bias=%v, mlp_bias=%v: Trellis's Llama has no biases", h.AttentionBias, h.MLPBias)
	}
	if s := bytes.TrimSpace(h.RopeScaling); len(s) > 0 && string(s) != "null" {
		bad("rope_scaling=%s: Trellis computes the default RoPE only (no scaled or extended rotary positions)", s)
	}
	if h.HeadDim != nil && h.NumAttentionHeads > 0 && *h.HeadDim != h.HiddenSize/h.NumAttentionHeads {
		bad("head_dim=%d: Trellis's heads are hidden_size/num_attention_heads=%d wide", *h.HeadDim, h.HiddenSize/h.NumAttentionHeads)
	}
	if h.AttentionDropout != 0 {
		bad("attention_dropout=%g: Trellis drops no attention probabilities", h.AttentionDropout)
	}
	c := model.Config{Arch: arch.Llama, Layers: h.NumHiddenLayers, Hidden: h.HiddenSize, Heads: h.NumAttentionHeads,
		FFN: h.IntermediateSize, SeqLen: h.MaxPositionEmbeddings, Vocab: h.VocabSize, RopeTheta: hfLlamaTheta, NormEps: hfLlamaEps}
	if h.IntermediateSize <= 0 {
		bad("intermediate_size=%d must be positive", h.IntermediateSize)
	}
	if h.NumKeyValueHeads != nil {
		c.KVHeads = *h.NumKeyValueHeads
		if c.KVHeads <= 0 {
			bad("num_key_value_heads=%d must be positive", c.KVHeads)
		}
	}
	if h.RMSNormEps != nil {
		c.NormEps = *h.RMSNormEps
	}
	if h.RopeTheta != nil {
		c.RopeTheta = *h.RopeTheta
	}
	if h.TieWordEmbeddings != nil {
		c.TieEmbeddings = *h.TieWordEmbeddings
	}
	if err := c.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("config.json: %w", err))
	}
	return c, errors.Join(errs...)
}

// parseLlama decodes a Llama config.json (unknown fields allowed:
// transformers writes token ids, its version and more).
func parseLlama(b []byte) (LlamaConfig, error) {
	var h LlamaConfig
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&h); err != nil {
		return h, fmt.Errorf("config.json: %w", err)
	}
	return h, nil
}

// isLlamaBuffer is a tensor older Llama exports carry that is not a
// weight: RoPE's inverse frequencies.
func isLlamaBuffer(n string) bool { return strings.HasSuffix(n, ".rotary_emb.inv_freq") }
