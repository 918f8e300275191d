package plan

import (
	"encoding/json"
	"fmt"
	"strings"
)

// hfConfig holds the fields of a Hugging Face config.json that the planner
// reads, for model_type "gpt2" and "llama" (pointers tell absent from zero).
type hfConfig struct {
	ModelType string `json:"model_type"`
	Name      string `json:"_name_or_path"`
	Vocab     *int   `json:"vocab_size"`
	Tie       *bool  `json:"tie_word_embeddings"`

	// gpt2
	NEmbd      *int `json:"n_embd"`
	NLayer     *int `json:"n_layer"`
	NHead      *int `json:"n_head"`
	NInner     *int `json:"n_inner"`
	NPositions *int `json:"n_positions"`
	NCtx       *int `json:"n_ctx"`

	// llama
	HiddenSize   *int  `json:"hidden_size"`
	Layers       *int  `json:"num_hidden_layers"`
	Heads        *int  `json:"num_attention_heads"`
	KVHeads      *int  `json:"num_key_value_heads"`
	HeadDim      *int  `json:"head_dim"`
	Intermediate *int  `json:"intermediate_size"`
	MaxPos       *int  `json:"max_position_embeddings"`
	AttnBias     *bool `json:"attention_bias"`
	MLPBias      *bool `json:"mlp_bias"`

	hfMoE // the expert and latent-attention families (hfmoe.go)
}

// maxDim bounds every size read from a file, so that products of sizes stay
// far inside int64 (a hostile file cannot overflow the parameter count).
const maxDim = 1 << 24

// ParseHFConfig reads a Hugging Face config.json of model_type "gpt2" or
// "llama", or of the expert and latent-attention families ("mixtral",
// "qwen2_moe", "qwen3", "qwen3_moe", "deepseek_v2", "deepseek_v3",
// "kimi_k2", "gpt_oss"; hfmoe.go). name labels the model when the file
// has no _name_or_path.
// Missing optional fields take Hugging Face's defaults (gpt2: n_inner = 4h,
// tied embeddings; llama: kv heads = heads, untied embeddings, no biases).
func ParseHFConfig(data []byte, name string) (Model, error) {
	var c hfConfig
	if err := json.Unmarshal(data, &c); err != nil {
		return Model{}, fmt.Errorf("plan: config.json: %w", err)
	}
	if c.Name != "" {
		name = c.Name
	}
	name = printable(name) // a downloaded file's name reaches the terminal
	var m Model
	var err error
	switch c.ModelType {
	case "gpt2":
		m, err = c.gpt2(name)
	case "llama":
		m, err = c.llama(name)
	default:
		if !contains(hfMoETypes(), c.ModelType) {
			return Model{}, fmt.Errorf("plan: config.json: model_type %q: want gpt2 or llama, or one of the expert and latent-attention families %s", c.ModelType, strings.Join(hfMoETypes(), ", "))
		}
		m, err = c.moeModel(name)
	}
	if err != nil {
		return Model{}, err
	}
	if err := m.Validate(); err != nil {
		return Model{}, fmt.Errorf("plan: config.json: %w", err)
	}
	return m, nil
}

func need(field string, v *int) (int, error) {
	if v == nil {
		return 0, fmt.Errorf("plan: config.json: %s is missing", field)
	}
	return bounded(field, *v)
}

func bounded(field string, v int) (int, error) {
	if v < 1 || v > maxDim {
		return 0, fmt.Errorf("plan: config.json: %s=%d: want 1..%d", field, v, maxDim)
	}
	return v, nil
}

func optional(field string, v *int, def int) (int, error) {
	if v == nil {
		return def, nil
	}
	return bounded(field, *v)
}

func (c hfConfig) gpt2(name string) (Model, error) {
	var m Model
	var err error
	m.Name, m.Family, m.AttnBias, m.MLPBias, m.Dropout, m.Tied = name, GPT, true, true, true, true
	if m.Hidden, err = need("n_embd", c.NEmbd); err != nil {
		return m, err
	}
	if m.Layers, err = need("n_layer", c.NLayer); err != nil {
		return m, err
	}
	if m.Heads, err = need("n_head", c.NHead); err != nil {
		return m, err
	}
	if m.Vocab, err = need("vocab_size", c.Vocab); err != nil {
		return m, err
	}
	if m.FFN, err = optional("n_inner", c.NInner, 4*m.Hidden); err != nil {
		return m, err
	}
	pos := c.NPositions
	if pos == nil {
		pos = c.NCtx
	}
	if m.MaxSeq, err = need("n_positions", pos); err != nil {
		return m, err
	}
	m.KVHeads = m.Heads
	if c.Tie != nil {
		m.Tied = *c.Tie
	}
	return m, nil
}

func (c hfConfig) llama(name string) (Model, error) {
	var m Model
	var err error
	m.Name, m.Family = name, Llama
	if m.Hidden, err = need("hidden_size", c.HiddenSize); err != nil {
		return m, err
	}
	if m.Layers, err = need("num_hidden_layers", c.Layers); err != nil {
		return m, err
	}
	if m.Heads, err = need("num_attention_heads", c.Heads); err != nil {
		return m, err
	}
	if m.KVHeads, err = optional("num_key_value_heads", c.KVHeads, m.Heads); err != nil {
		return m, err
	}
	if m.FFN, err = need("intermediate_size", c.Intermediate); err != nil {
		return m, err
	}
	if m.Vocab, err = need("vocab_size", c.Vocab); err != nil {
		return m, err
	}
	if m.MaxSeq, err = optional("max_position_embeddings", c.MaxPos, 2048); err != nil {
		return m, err
	}
	if c.HeadDim != nil {
		if m.HeadDim, err = bounded("head_dim", *c.HeadDim); err != nil {
			return m, err
		}
	}
	if c.Tie != nil {
		m.Tied = *c.Tie
	}
	m.AttnBias = c.AttnBias != nil && *c.AttnBias
	m.MLPBias = c.MLPBias != nil && *c.MLPBias
	return m, nil
}
