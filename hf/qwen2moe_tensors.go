package hf

import (
	"fmt"
	"slices"
	"strings"

	"trellis/model"
	"trellis/safetensors"
)

// hfTensor is one tensor in the Hugging Face layout: its name, shape and
// values (row-major).
type hfTensor struct {
	name  string
	shape []int
	v     []float32
}

// exportTensors are the Hugging Face tensors of cfg's flat vector w: one
// a Trellis tensor, except an MoE layer's expert stacks (E matrices each,
// splitExperts), and Qwen2-MoE's tensors Trellis has no use for, written
// as the values that compute Trellis's block (qwenZeros).
func exportTensors(cfg model.Config, w []float32) []hfTensor {
	var out []hfTensor
	for _, u := range cfg.Layout().Units {
		for _, t := range u.Tensors {
			v := w[t.Offset : t.Offset+t.Size]
			if cfg.Experts > 0 && t.Expert {
				out = append(out, splitExperts(t, v)...)
				continue
			}
			out = append(out, hfTensor{hfName(cfg, t.Name), HFShape(t), toHF(t, v)})
		}
	}
	if cfg.Experts > 0 {
		out = append(out, qwenZeros(cfg)...)
	}
	return out
}

// expertNames are the Hugging Face names of expert e's matrices that a
// Trellis expert stack holds: "layers.l.mlp.experts.gate_up_proj" (E,2F,C)
// holds model.layers.l.mlp.experts.e.gate_proj.weight (F,C) then
// up_proj.weight (F,C); "….down_proj" (E,C,F) holds ….e.down_proj.weight.
func expertNames(t model.Tensor, e int) []string {
	base, _ := strings.CutSuffix(t.Name, "gate_up_proj")
	p := fmt.Sprintf("%s%s%d.", LlamaPrefix, strings.TrimSuffix(base, "down_proj"), e)
	if strings.HasSuffix(t.Name, "gate_up_proj") {
		return []string{p + "gate_proj.weight", p + "up_proj.weight"}
	}
	return []string{p + "down_proj.weight"}
}

// expertShape is the (out, in) shape of each of expert e's matrices in
// stack t: (F,C) for gate and up, (C,F) for down.
func expertShape(t model.Tensor) []int {
	n := len(expertNames(t, 0))
	return []int{t.Shape[1] / n, t.Shape[2]}
}

// splitExperts is stack t's values v as E·(2 or 1) matrices in Hugging
// Face's names, slices of v (expert e's rows [gate | up] are contiguous).
func splitExperts(t model.Tensor, v []float32) []hfTensor {
	sh := expertShape(t)
	size := sh[0] * sh[1]
	var out []hfTensor
	for e := 0; e < t.Shape[0]; e++ {
		for i, n := range expertNames(t, e) {
			at := (e*len(expertNames(t, e)) + i) * size
			out = append(out, hfTensor{n, sh, v[at : at+size]})
		}
	}
	return out
}

// qwenZeros are the Qwen2-MoE tensors that are zero in Trellis's block:
// every layer's q, k and v biases, and in each MoE layer the shared
// expert of width 0 (three empty matrices) and its gate (1,C), zeros (its
// output, sigmoid(0)·0, is 0 whatever the gate).
func qwenZeros(cfg model.Config) []hfTensor {
	C, q, kv := cfg.Hidden, cfg.Heads*cfg.HeadSize(), cfg.KV()*cfg.HeadSize()
	var out []hfTensor
	for l := 0; l < cfg.Layers; l++ {
		p := fmt.Sprintf("%slayers.%d.", LlamaPrefix, l)
		out = append(out, hfTensor{p + "self_attn.q_proj.bias", []int{q}, make([]float32, q)},
			hfTensor{p + "self_attn.k_proj.bias", []int{kv}, make([]float32, kv)},
			hfTensor{p + "self_attn.v_proj.bias", []int{kv}, make([]float32, kv)})
		if cfg.MoELayer(l) {
			out = append(out, hfTensor{p + "mlp.shared_expert.gate_proj.weight", []int{0, C}, nil},
				hfTensor{p + "mlp.shared_expert.up_proj.weight", []int{0, C}, nil},
				hfTensor{p + "mlp.shared_expert.down_proj.weight", []int{C, 0}, nil},
				hfTensor{p + "mlp.shared_expert_gate.weight", []int{1, C}, make([]float32, C)})
		}
	}
	return out
}

// readExperts fills dst, expert stack t, from its E·(2 or 1) Hugging Face
// matrices, removing their names from names. (Read takes the stack under
// its own name first — model.layers.l.mlp.experts.gate_up_proj (E,2F,C)
// and down_proj (E,C,F), transformers 5's fused experts, which are
// Trellis's layout — and calls this only without it.)
func readExperts(f *safetensors.File, names map[string]bool, t model.Tensor, dst []float32) []error {
	sh := expertShape(t)
	size := sh[0] * sh[1]
	var errs []error
	for e := 0; e < t.Shape[0]; e++ {
		for i, n := range expertNames(t, e) {
			if !names[n] {
				errs = append(errs, fmt.Errorf("hf: %s: missing tensor %s", f.Name(), n))
				continue
			}
			delete(names, n)
			at := (e*len(expertNames(t, e)) + i) * size
			if err := readTensor(f, n, model.Tensor{Name: n, Shape: sh, Size: size}, dst[at:at+size]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errs
}

// qwenUnused reports whether tensor n of f is one a Qwen2-MoE holds that
// Trellis's block computes without — a zero q, k or v bias; with experts,
// an empty shared expert's matrix or its gate —, or the error naming it
// when it is such a tensor with values Trellis cannot compute.
func qwenUnused(f *safetensors.File, n string, cfg model.Config) (bool, error) {
	for _, s := range []string{".self_attn.q_proj.bias", ".self_attn.k_proj.bias", ".self_attn.v_proj.bias"} {
		if !strings.HasSuffix(n, s) {
			continue
		}
		v, err := f.Float32(n)
		if err != nil {
			return false, err
		}
		if i := slices.IndexFunc(v, func(x float32) bool { return x != 0 }); i >= 0 {
			return false, fmt.Errorf("hf: %s: tensor %s is %g at element %d: Trellis's Llama has no attention biases (only zero ones are read)", f.Name(), n, v[i], i)
		}
		return true, nil
	}
	if cfg.Experts == 0 {
		return false, nil
	}
	if strings.HasSuffix(n, ".mlp.shared_expert_gate.weight") {
		return true, nil
	}
	if strings.Contains(n, ".mlp.shared_expert.") {
		info, err := f.Info(n)
		if err != nil {
			return false, err
		}
		if info.Numel() != 0 {
			return false, fmt.Errorf("hf: %s: tensor %s has shape %v: Trellis reads a Qwen2-MoE without a shared expert (shared_expert_intermediate_size=0)", f.Name(), n, info.Shape)
		}
		return true, nil
	}
	return false, nil
}
