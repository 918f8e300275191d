package arch

import "fmt"

// params declares the architecture's parameters, unit by unit, in flat
// order (gpt2Params, llamaParams).
func (c Config) params() []unitSpec {
	if c.IsLlama() {
		return c.llamaParams()
	}
	return c.gpt2Params()
}

// gpt2Params declares GPT-2's parameters, unit by unit, in flat order. Names
// follow Hugging Face's GPT-2, but linear weights are stored (out, in) as
// in torch.nn.Linear (HF's Conv1D stores the transpose). The c_attn output
// is [q | k | v], each C wide with head h at columns [h·HS, (h+1)·HS).
// Under tensor parallelism (Megatron; see Part) c_attn and mlp.c_fc are
// column-parallel (their outputs split: by heads, by the 4C inner width),
// attn.c_proj and mlp.c_proj row-parallel (their inputs split the same
// way, their biases replicated and added once after the reduction), wte
// vocab-parallel (⌈V/t⌉ rows per rank), the rest replicated.
func (c Config) gpt2Params() []unitSpec {
	C, L := c.Hidden, c.Layers
	wte := shard("wte", 0, c.Vocab, C)
	wte.tp.Ceil = true
	units := []unitSpec{{"embedding", []tensorSpec{wte, rep("wpe", c.SeqLen, C)}}}
	for l := 0; l < L; l++ {
		n := func(s string) string { return fmt.Sprintf("h.%d.%s", l, s) }
		units = append(units, unitSpec{fmt.Sprintf("h.%d", l), []tensorSpec{
			rep(n("ln_1.weight"), C), rep(n("ln_1.bias"), C),
			shardView(n("attn.c_attn.weight"), []int{3, C, C}, 1, 3*C, C),
			shardView(n("attn.c_attn.bias"), []int{3, C}, 1, 3*C),
			shard(n("attn.c_proj.weight"), 1, C, C), rep(n("attn.c_proj.bias"), C),
			rep(n("ln_2.weight"), C), rep(n("ln_2.bias"), C),
			shard(n("mlp.c_fc.weight"), 0, 4*C, C), shard(n("mlp.c_fc.bias"), 0, 4*C),
			shard(n("mlp.c_proj.weight"), 1, C, 4*C), rep(n("mlp.c_proj.bias"), C),
		}})
	}
	units = append(units, unitSpec{"ln_f", []tensorSpec{rep("ln_f.weight", C), rep("ln_f.bias", C)}})
	return units
}
