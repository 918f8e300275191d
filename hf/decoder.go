package hf

import (
	"bytes"
	"encoding/json"
	"fmt"

	"trellis/arch"
	"trellis/model"
)

// decoderConfig is what Hugging Face's configs of Llama-shaped decoders
// share (LlamaConfig, Qwen2MoeConfig embed it): the sizes, RMSNorm's ε,
// RoPE and the SwiGLU activation. Pointers tell absent from zero where
// transformers' default is not zero.
type decoderConfig struct {
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
	AttentionDropout      float64         `json:"attention_dropout"`
	InitializerRange      float64         `json:"initializer_range,omitempty"`
	TorchDType            string          `json:"torch_dtype,omitempty"`
}

// decoderOf is Trellis Llama c's decoderConfig as Hugging Face
// architecture name (model_type mt) in dtype: every field that decides
// the architecture, max_position_embeddings the job's seq_len.
func decoderOf(c model.Config, name, mt, dtype string) decoderConfig {
	kv, hd := c.KV(), c.HeadSize()
	eps, theta, tied := c.Eps(), c.Theta(), c.Tied()
	return decoderConfig{
		Architectures: []string{name}, ModelType: mt,
		HiddenSize: c.Hidden, NumHiddenLayers: c.Layers, NumAttentionHeads: c.Heads, NumKeyValueHeads: &kv, HeadDim: &hd,
		IntermediateSize: c.FFNWidth(), VocabSize: c.Vocab, MaxPositionEmbeddings: c.SeqLen,
		RMSNormEps: &eps, RopeTheta: &theta, TieWordEmbeddings: &tied, HiddenAct: "silu",
		InitializerRange: model.InitStd, TorchDType: dtype,
	}
}

// llama maps d to a Trellis Llama's keys, the absent fields at the
// architecture's defaults (kv key/value heads, 0 for one a query head;
// theta, eps), with one error for each field Trellis's Llama does not
// compute, naming the field and the rule.
func (d decoderConfig) llama(kv int, theta, eps float64) (model.Config, []error) {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("config.json: "+format, a...)) }
	if act := d.HiddenAct; act != "" && act != "silu" {
		bad("hidden_act=%q: Trellis's Llama computes SwiGLU with silu", act)
	}
	if s := bytes.TrimSpace(d.RopeScaling); len(s) > 0 && string(s) != "null" {
		bad("rope_scaling=%s: Trellis computes the default RoPE only (no scaled or extended rotary positions)", s)
	}
	if d.HeadDim != nil && d.NumAttentionHeads > 0 && *d.HeadDim != d.HiddenSize/d.NumAttentionHeads {
		bad("head_dim=%d: Trellis's heads are hidden_size/num_attention_heads=%d wide", *d.HeadDim, d.HiddenSize/d.NumAttentionHeads)
	}
	if d.AttentionDropout != 0 {
		bad("attention_dropout=%g: Trellis drops no attention probabilities", d.AttentionDropout)
	}
	c := model.Config{Arch: arch.Llama, Layers: d.NumHiddenLayers, Hidden: d.HiddenSize, Heads: d.NumAttentionHeads,
		KVHeads: kv, FFN: d.IntermediateSize, SeqLen: d.MaxPositionEmbeddings, Vocab: d.VocabSize, RopeTheta: theta, NormEps: eps}
	if d.IntermediateSize <= 0 {
		bad("intermediate_size=%d must be positive", d.IntermediateSize)
	}
	if d.NumKeyValueHeads != nil {
		if c.KVHeads = *d.NumKeyValueHeads; c.KVHeads <= 0 {
			bad("num_key_value_heads=%d must be positive", c.KVHeads)
		}
	}
	if d.RMSNormEps != nil {
		c.NormEps = *d.RMSNormEps
	}
	if d.RopeTheta != nil {
		c.RopeTheta = *d.RopeTheta
	}
	if d.TieWordEmbeddings != nil {
		c.TieEmbeddings = *d.TieWordEmbeddings
	}
	return c, errs
}
