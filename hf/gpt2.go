// Package hf moves GPT-2 and Llama weights between Trellis and the
// Hugging Face layout: a directory with model.safetensors and config.json
// that transformers' GPT2LMHeadModel, LlamaForCausalLM or (a Llama with
// experts) Qwen2MoeForCausalLM .from_pretrained loads (a Llama's names
// are in llama.go, the MoE mapping in qwen2moe.go).
//
// A GPT-2's two layouts hold the same tensors under related names:
//
//	Trellis (flat vector, model.Layout)     Hugging Face (GPT2LMHeadModel)
//	wte (V,C)                               transformer.wte.weight (V,C)
//	wpe (T,C)                               transformer.wpe.weight (T,C)
//	h.l.ln_1.weight / .bias (C)             transformer.h.l.ln_1.weight / .bias
//	h.l.attn.c_attn.weight (3C,C)           transformer.h.l.attn.c_attn.weight (C,3C)   transposed
//	h.l.attn.c_proj.weight (C,C)            transformer.h.l.attn.c_proj.weight (C,C)    transposed
//	h.l.mlp.c_fc.weight (4C,C)              transformer.h.l.mlp.c_fc.weight (C,4C)      transposed
//	h.l.mlp.c_proj.weight (C,4C)            transformer.h.l.mlp.c_proj.weight (4C,C)    transposed
//	ln_f.weight / .bias (C)                 transformer.ln_f.weight / .bias
//	(tied to wte)                           lm_head.weight: not written (tied), accepted on import
//
// Trellis stores a linear weight (out, in) as torch.nn.Linear does, and
// computes y = x·Wᵀ + b; Hugging Face's GPT-2 uses Conv1D, which stores
// (in, out) and computes y = x·W + b. Every other tensor is identical,
// including c_attn's [q | k | v] column order and the per-head split.
package hf

import (
	"fmt"
	"strings"

	"trellis/model"
)

// Prefix is the module path GPT2LMHeadModel gives the transformer's
// tensors. Import also accepts names without it (GPT2Model checkpoints, and
// OpenAI's original gpt2 model.safetensors).
const Prefix = "transformer."

// Name is the Hugging Face name of a Trellis tensor: the prefix, and the
// embeddings, which Trellis names wte and wpe, are nn.Embedding modules
// there (wte.weight, wpe.weight).
func Name(trellis string) string { return Prefix + bare(trellis) }

// bare is the Hugging Face name without the prefix.
func bare(trellis string) string {
	if trellis == "wte" || trellis == "wpe" {
		return trellis + ".weight"
	}
	return trellis
}

// Transposed reports whether the Hugging Face layout stores the tensor
// transposed (the four Conv1D weights of each block).
func Transposed(trellis string) bool {
	if !strings.HasSuffix(trellis, ".weight") {
		return false
	}
	for _, s := range []string{".attn.c_attn.", ".attn.c_proj.", ".mlp.c_fc.", ".mlp.c_proj."} {
		if strings.Contains(trellis, s) {
			return true
		}
	}
	return false
}

// HFShape is the shape the Hugging Face layout stores a Trellis tensor in.
func HFShape(t model.Tensor) []int {
	if Transposed(t.Name) {
		return []int{t.Shape[1], t.Shape[0]}
	}
	return append([]int(nil), t.Shape...)
}

// transpose writes the (rows, cols) row-major src transposed into dst
// (cols, rows).
func transpose(dst, src []float32, rows, cols int) {
	if len(src) != rows*cols || len(dst) != rows*cols {
		panic(fmt.Sprintf("hf: transpose of %d×%d with %d and %d elements", rows, cols, len(src), len(dst)))
	}
	for r := 0; r < rows; r++ {
		row := src[r*cols : (r+1)*cols]
		for c, v := range row {
			dst[c*rows+r] = v
		}
	}
}

// toHF returns tensor t's values, a slice of the flat vector, in the
// Hugging Face layout (a copy when transposed, else the slice itself).
func toHF(t model.Tensor, v []float32) []float32 {
	if !Transposed(t.Name) {
		return v
	}
	out := make([]float32, len(v))
	transpose(out, v, t.Shape[0], t.Shape[1])
	return out
}

// fromHF writes the Hugging Face values v of tensor t into dst, its slice
// of the flat vector.
func fromHF(t model.Tensor, v, dst []float32) {
	if !Transposed(t.Name) {
		copy(dst, v)
		return
	}
	transpose(dst, v, t.Shape[1], t.Shape[0])
}
