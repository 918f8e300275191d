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
package arch

import (
	"errors"
	"fmt"

	"trellis/internal/checked"
)

// Config is the [model] section of a job file.
type Config struct {
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
	if len(errs) == 0 {
		if _, ok := c.numParams(); !ok {
			errs = append(errs, fmt.Errorf("model: %v has more parameters than a 64-bit count holds (V·C + T·C + L·(12C²+13C) + 2C %v)", c, checked.ErrOverflow))
		}
	}
	return errors.Join(errs...)
}

// String names every field, for messages: "layers=4 hidden=256 heads=4
// seq_len=128 vocab=256 dropout=0".
func (c Config) String() string {
	return fmt.Sprintf("layers=%d hidden=%d heads=%d seq_len=%d vocab=%d dropout=%g",
		c.Layers, c.Hidden, c.Heads, c.SeqLen, c.Vocab, c.Dropout)
}

// numParams is NumParams with every product and sum checked; ok is false
// when the count does not fit an int.
func (c Config) numParams() (int, bool) {
	C := int64(c.Hidden)
	var sum int64
	terms := [][]int64{{int64(c.Vocab), C}, {int64(c.SeqLen), C}, {2, C}, {int64(c.Layers), 12, C, C}, {int64(c.Layers), 13, C}}
	for _, t := range terms {
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

// blockParams is the number of parameters of one transformer block:
// two LayerNorms (4C), QKV (3C·C + 3C), attention projection (C·C + C),
// MLP up (4C·C + 4C) and down (C·4C + C) = 12C² + 13C.
func blockParams(C int) int { return 12*C*C + 13*C }

// NumParams is the number of parameters: V·C + T·C + L·(12C² + 13C) + 2C
// (the LM head shares wte). GPT-2 124M (L=12, C=768, T=1024, V=50257) has
// 124,439,808.
func (c Config) NumParams() int {
	return c.Vocab*c.Hidden + c.SeqLen*c.Hidden + c.Layers*blockParams(c.Hidden) + 2*c.Hidden
}

// FLOPsPerToken is the training cost of one token, forward and backward,
// in floating-point operations (a multiply-add counts 2):
//
//	6·N + 12·L·T·C
//
// 6·N: every parameter takes part in one multiply-add per token in the
// forward pass and two in the backward (the input and the weight
// gradients), N = NumParams() (the embeddings are counted as if they were
// matmuls, which the tied LM head makes nearly true). 12·L·T·C: attention's
// Q·Kᵀ and P·V cost 2·T·C each per token and layer in the forward pass, twice
// that in the backward, counted over the full T×T scores (the usual
// convention, as in PaLM and llm.c, although the causal mask lets kernels
// skip about half). MFU = tokens/s · FLOPsPerToken / peak FLOP/s.
func (c Config) FLOPsPerToken() float64 {
	return 6*float64(c.NumParams()) + 12*float64(c.Layers)*float64(c.SeqLen)*float64(c.Hidden)
}
