package hf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"trellis/model"
	"trellis/ops"
)

// Config is the part of a Hugging Face GPT2Config (config.json) that
// decides the architecture. Fields Trellis cannot honour are refused by
// ModelConfig rather than silently ignored.
type Config struct {
	Architectures       []string `json:"architectures"`
	ModelType           string   `json:"model_type"`
	VocabSize           int      `json:"vocab_size"`
	NPositions          int      `json:"n_positions"`
	NCtx                int      `json:"n_ctx,omitempty"`
	NEmbd               int      `json:"n_embd"`
	NLayer              int      `json:"n_layer"`
	NHead               int      `json:"n_head"`
	NInner              *int     `json:"n_inner"`
	ActivationFunction  string   `json:"activation_function"`
	ResidPdrop          float64  `json:"resid_pdrop"`
	EmbdPdrop           float64  `json:"embd_pdrop"`
	AttnPdrop           float64  `json:"attn_pdrop"`
	LayerNormEpsilon    float64  `json:"layer_norm_epsilon"`
	InitializerRange    float64  `json:"initializer_range"`
	ScaleAttnWeights    *bool    `json:"scale_attn_weights,omitempty"`
	ScaleAttnByLayerIdx bool     `json:"scale_attn_by_inverse_layer_idx"`
	TieWordEmbeddings   *bool    `json:"tie_word_embeddings,omitempty"`
	TorchDType          string   `json:"torch_dtype,omitempty"`
}

// gpt2Activations are the activation_function values that mean GPT-2's
// tanh approximation of GELU, the one ops.GELUForward computes.
var gpt2Activations = []string{"gelu_new", "gelu_pytorch_tanh"}

// ConfigOf is the config.json of a Trellis model. Dropout is written for
// all three of GPT-2's dropout sites (Trellis has one probability).
func ConfigOf(c model.Config, dtype string) Config {
	tied, scale := true, true
	return Config{
		Architectures: []string{"GPT2LMHeadModel"}, ModelType: "gpt2",
		VocabSize: c.Vocab, NPositions: c.SeqLen, NCtx: c.SeqLen,
		NEmbd: c.Hidden, NLayer: c.Layers, NHead: c.Heads,
		ActivationFunction: gpt2Activations[0],
		ResidPdrop:         c.Dropout, EmbdPdrop: c.Dropout, AttnPdrop: c.Dropout,
		LayerNormEpsilon: ops.LayerNormEps, InitializerRange: model.InitStd,
		ScaleAttnWeights: &scale, TieWordEmbeddings: &tied, TorchDType: dtype,
	}
}

// ModelConfig maps a Hugging Face config to Trellis's, refusing — each
// with the field and the rule — what Trellis's GPT does not compute.
func (h Config) ModelConfig() (model.Config, error) {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("config.json: "+format, a...)) }
	if h.ModelType != "" && h.ModelType != "gpt2" {
		bad("model_type=%q: Trellis loads gpt2, llama and qwen2_moe", h.ModelType)
	}
	act := h.ActivationFunction
	if act == "" {
		act = gpt2Activations[0] // GPT2Config's default
	}
	if !slices.Contains(gpt2Activations, act) {
		bad("activation_function=%q: Trellis computes GELU's tanh approximation (gelu_new)", act)
	}
	if h.NInner != nil && *h.NInner != 4*h.NEmbd {
		bad("n_inner=%d: Trellis's MLP is 4·n_embd=%d wide", *h.NInner, 4*h.NEmbd)
	}
	if eps := h.LayerNormEpsilon; eps != 0 && eps != ops.LayerNormEps {
		bad("layer_norm_epsilon=%g: Trellis's LayerNorm uses %g", eps, ops.LayerNormEps)
	}
	if h.ScaleAttnWeights != nil && !*h.ScaleAttnWeights {
		bad("scale_attn_weights=false: Trellis scales attention scores by 1/√head_size")
	}
	if h.ScaleAttnByLayerIdx {
		bad("scale_attn_by_inverse_layer_idx=true is not supported")
	}
	if h.TieWordEmbeddings != nil && !*h.TieWordEmbeddings {
		bad("tie_word_embeddings=false: Trellis's LM head is tied to wte")
	}
	drop := h.ResidPdrop
	if h.EmbdPdrop != drop || h.AttnPdrop != drop {
		bad("resid_pdrop=%g, embd_pdrop=%g, attn_pdrop=%g: Trellis has one dropout probability (set them equal)", h.ResidPdrop, h.EmbdPdrop, h.AttnPdrop)
	}
	c := model.Config{Layers: h.NLayer, Hidden: h.NEmbd, Heads: h.NHead, SeqLen: h.NPositions, Vocab: h.VocabSize, Dropout: drop}
	if err := c.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("config.json: %w", err))
	}
	return c, errors.Join(errs...)
}

// ParseModelConfig reads any config.json Trellis loads — model_type
// "gpt2" (or none: GPT-2's), "llama" or "qwen2_moe" (an MoE Llama,
// qwen2moe.go) — into a model configuration.
func ParseModelConfig(b []byte) (model.Config, error) {
	var head struct {
		ModelType string `json:"model_type"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return model.Config{}, fmt.Errorf("config.json: %w", err)
	}
	switch head.ModelType {
	case "llama":
		h, err := parseLlama(b)
		if err != nil {
			return model.Config{}, err
		}
		return h.ModelConfig()
	case "qwen2_moe":
		h, err := parseQwen2Moe(b)
		if err != nil {
			return model.Config{}, err
		}
		return h.ModelConfig()
	}
	h, err := ParseConfig(b)
	if err != nil {
		return model.Config{}, err
	}
	return h.ModelConfig()
}

// ParseConfig decodes config.json. Unknown fields are allowed (transformers
// writes many that do not change the architecture: token ids, task
// parameters, its version).
func ParseConfig(b []byte) (Config, error) {
	var h Config
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&h); err != nil {
		return h, fmt.Errorf("config.json: %w", err)
	}
	return h, nil
}
