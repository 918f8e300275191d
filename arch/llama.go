package arch

import "fmt"

// llamaParams declares Llama's parameters, unit by unit, in flat order,
// under Hugging Face's LlamaForCausalLM names without its "model." prefix
// (linear weights (out, in), as torch.nn.Linear stores them):
//
//	unit 0     embedding   embed_tokens.weight (V,C)
//	unit 1+l   layers.l    input_layernorm.weight (C)
//	                       self_attn.q_proj.weight (NH·HS,C), k_proj (NKV·HS,C), v_proj (NKV·HS,C)
//	                       self_attn.o_proj.weight (C,NH·HS)
//	                       post_attention_layernorm.weight (C)
//	                       mlp.gate_proj.weight (F,C), up_proj (F,C), down_proj (C,F)
//	unit L+1   head        norm.weight (C), lm_head.weight (V,C) (untied only)
//
// Under tensor parallelism (Megatron) q, k, v, gate and up are
// column-parallel (split by rows: rank r holds query heads [r·NH/t,
// (r+1)·NH/t), key/value heads [r·NKV/t, (r+1)·NKV/t) — the heads of its
// query heads' groups — and SwiGLU columns [r·F/t, (r+1)·F/t)), o_proj and
// down_proj row-parallel (split by columns the same way), embed_tokens and
// lm_head vocab-parallel (⌈V/t⌉ rows per rank), the norms replicated.
// Because q, k and v follow each other in the unit, a rank's three parts
// are one ((NH+2·NKV)/t·HS, C) matrix: one GEMM gives its qkv rows
// [q | k | v]; gate and up likewise one (2F/t, C) matrix giving [gate | up]
// (two tensors in Hugging Face's names, one column-parallel GEMM).
func (c Config) llamaParams() []unitSpec {
	C, L, HS, F := c.Hidden, c.Layers, c.HeadSize(), c.FFNWidth()
	q, kv := c.Heads*HS, c.KV()*HS
	vocab := func(name string) tensorSpec {
		s := shard(name, 0, c.Vocab, C)
		s.tp.Ceil = true
		return s
	}
	units := []unitSpec{{"embedding", []tensorSpec{vocab("embed_tokens.weight")}}}
	for l := 0; l < L; l++ {
		n := func(s string) string { return fmt.Sprintf("layers.%d.%s", l, s) }
		ts := []tensorSpec{
			rep(n("input_layernorm.weight"), C),
			shard(n("self_attn.q_proj.weight"), 0, q, C),
			shard(n("self_attn.k_proj.weight"), 0, kv, C),
			shard(n("self_attn.v_proj.weight"), 0, kv, C),
			shard(n("self_attn.o_proj.weight"), 1, C, q),
			rep(n("post_attention_layernorm.weight"), C),
		}
		if c.MoELayer(l) {
			ts = append(ts, c.moeParams(n)...)
		} else {
			ts = append(ts, shard(n("mlp.gate_proj.weight"), 0, F, C),
				shard(n("mlp.up_proj.weight"), 0, F, C),
				shard(n("mlp.down_proj.weight"), 1, C, F))
		}
		units = append(units, unitSpec{fmt.Sprintf("layers.%d", l), ts})
	}
	head := []tensorSpec{rep("norm.weight", C)}
	if !c.Tied() {
		head = append(head, vocab("lm_head.weight"))
	}
	return append(units, unitSpec{"head", head})
}

// llamaLocal are a Llama rank's widths: Q' = NH'·HS query columns, KV' =
// NKV'·HS key (and value) columns, F' = F/t SwiGLU columns, NH' = NH/t
// heads, V' = ⌈V/t⌉ vocabulary rows.
func (c Config) llamaLocal(p Part) (Q, KV, F, NH, V float64) {
	t := p.Degree()
	HS := c.HeadSize()
	return float64(c.Heads / t * HS), float64(c.KV() / t * HS), float64(c.FFNWidth() / t), float64(c.Heads / t), float64(p.VocabRows(c))
}

// llamaBlockSaved declares what one Llama block keeps for its backward
// pass, in the order the stash carves it (n = Tokens):
//
//	input_layernorm           out (n,C) operand, rstd (n)
//	self_attn                 qkv (B,T,Q'+2·KV') operand: q and k already rotated
//	                          (RoPE runs once, in the forward; the core's input)
//	                          probabilities (B,NH',T,T), or with flash log-sum-exps (B,NH',T);
//	                          out (B,T,Q') operand, o_proj's input
//	residual                  res2 (n,C)
//	post_attention_layernorm  out (n,C) operand, rstd (n)
//	mlp                       gate_up (B,T,2F') operand, SwiGLU's input [gate | up];
//	                          act = SiLU(gate)⊙up (B,T,F') operand, down_proj's input
//
// Selective recomputation (Korthikanti et al. 2022) drops the
// probabilities, as for GPT-2: the core (q·kᵀ, softmax, ·v) reruns from
// the saved, rotated qkv.
func (c Config) llamaBlockSaved(d Dims) []Saved {
	Q, KV, F, NH, _ := c.llamaLocal(d.Part)
	n, BT, C, B, T := d.tokensF(), float64(d.B)*float64(d.T), float64(c.Hidden), float64(d.B), float64(d.T)
	att := Saved{Name: "self_attn.probs", Class: Exact, Role: Probs, Elems: B * NH * T * T}
	if d.Flash {
		att = Saved{Name: "self_attn.lse", Class: Exact, Elems: B * NH * T}
	}
	return []Saved{
		{Name: "input_layernorm.out", Class: Operand, Elems: n * C},
		{Name: "input_layernorm.rstd", Class: Exact, Elems: n},
		{Name: "self_attn.qkv", Class: Operand, Elems: BT * (Q + 2*KV)},
		att,
		{Name: "self_attn.out", Class: Operand, Elems: BT * Q},
		{Name: "res2", Class: Exact, Elems: n * C},
		{Name: "post_attention_layernorm.out", Class: Operand, Elems: n * C},
		{Name: "post_attention_layernorm.rstd", Class: Exact, Elems: n},
		{Name: "mlp.gate_up", Class: Operand, Elems: 2 * BT * F},
		{Name: "mlp.act", Class: Operand, Elems: BT * F},
	}
}

// llamaMoESaved is what an MoE Llama block keeps: the attention half of
// llamaBlockSaved (through post_attention_layernorm) and the MoE layer's
// moeSaved in place of the SwiGLU's.
func (c Config) llamaMoESaved(d Dims) []Saved {
	s := c.llamaBlockSaved(d)
	return append(s[:len(s)-2:len(s)-2], c.moeSaved(d)...)
}

// llamaHeadSaved declares what the head keeps: the final RMSNorm's output
// (operand) and rstd, the softmax of the rank's V' logit columns and the
// per-token losses.
func (c Config) llamaHeadSaved(d Dims) []Saved {
	V := float64(d.Part.VocabRows(c))
	n, BT, C := d.tokensF(), float64(d.B)*float64(d.T), float64(c.Hidden)
	return []Saved{
		{Name: "norm.out", Class: Operand, Elems: n * C},
		{Name: "norm.rstd", Class: Exact, Elems: n},
		{Name: "probs", Class: Exact, Elems: BT * V},
		{Name: "losses", Class: Exact, Elems: BT},
	}
}

// llamaDeferredSaved declares a zero-bubble split backward's output
// gradients of a Llama block's four GEMMs (fp32): down_proj's and
// o_proj's (B,T,C), gate_up's (B,T,2F') and qkv's (B,T,Q'+2·KV').
func (c Config) llamaDeferredSaved(d Dims) []Saved {
	Q, KV, F, _, _ := c.llamaLocal(d.Part)
	BT, C := float64(d.B)*float64(d.T), float64(c.Hidden)
	return []Saved{
		{Name: "mlp.down_proj.dy", Class: Exact, Elems: BT * C},
		{Name: "mlp.gate_up.dy", Class: Exact, Elems: 2 * BT * F},
		{Name: "self_attn.o_proj.dy", Class: Exact, Elems: BT * C},
		{Name: "self_attn.qkv.dy", Class: Exact, Elems: BT * (Q + 2*KV)},
	}
}
