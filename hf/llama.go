package hf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

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
	decoderConfig
	AttentionBias bool `json:"attention_bias"`
	MLPBias       bool `json:"mlp_bias"`
	PretrainingTP int  `json:"pretraining_tp,omitempty"`
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
	return LlamaConfig{decoderConfig: decoderOf(c, "LlamaForCausalLM", "llama", dtype), PretrainingTP: 1}
}

// ModelConfig maps a Hugging Face Llama config to Trellis's, refusing —
// each with the field and the rule — what Trellis's Llama does not
// compute. seq_len is max_position_embeddings (a job may train shorter
// sequences).
func (h LlamaConfig) ModelConfig() (model.Config, error) {
	c, errs := h.llama(0, hfLlamaTheta, hfLlamaEps)
	if h.AttentionBias || h.MLPBias {
		errs = append(errs, fmt.Errorf("config.json: attention_bias=%v, mlp_bias=%v: Trellis's Llama has no biases", h.AttentionBias, h.MLPBias))
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
