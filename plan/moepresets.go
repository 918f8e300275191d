package plan

// moePresets are the Mixture-of-Experts models, each from its published
// Hugging Face config.json (the fields named there); moe_model_test.go
// holds their parameter counts to the published totals and active counts.
//
//   - mixtral-8x7b, mixtral-8x22b: mistralai/Mixtral-8x7B-v0.1 and
//     Mixtral-8x22B-v0.1: 8 experts (num_local_experts), top-2, every
//     layer; 46.7B / 12.9B and 141B / 39B (Mistral AI).
//   - qwen3-30b-a3b, qwen3-235b-a22b: Qwen/Qwen3-30B-A3B and
//     Qwen3-235B-A22B: 128 experts, top-8, no shared expert, per-head q/k
//     RMSNorm; 30.5B / 3.3B and 235B / 22B (the model cards).
//   - deepseek-v3: deepseek-ai/DeepSeek-V3: MLA (q_lora_rank 1536,
//     kv_lora_rank 512, heads of 128 + 64 rotary / 128), 256 routed
//     experts top-8 plus one shared, the first 3 layers dense (18432),
//     sigmoid scores with a bias, 8 groups of which 4 per token
//     (node-limited routing), one MTP module; 671B / 37B (DeepSeek-V3
//     report, §4.2; the active count leaves out the input embedding).
//   - kimi-k2: moonshotai/Kimi-K2-Instruct: DeepSeek-V3's shape with 64
//     heads, 384 experts, one dense layer, vocabulary 163,840, no group
//     limit, no MTP; 1T / 32B (the model card).
//   - deepseek-v2-lite: deepseek-ai/DeepSeek-V2-Lite (torchtitan's
//     deepseek_v3 "16B" flavor): MLA without query compression, 16 heads,
//     64 experts top-6 plus two shared, one dense layer; 15.7B / 2.4B.
//   - gpt-oss-120b: openai/gpt-oss-120b: 36 layers alternating a
//     128-token sliding window and full attention, 64 heads of 64, 8 kv
//     heads, attention biases and sinks, 128 experts top-4 with biases,
//     router bias; 116.83B / 5.13B (OpenAI's model card, the active count
//     without the input embedding).
func moePresets() []Model {
	moeModel := func(name string, layers, hidden, heads, kv, ffn, vocab, maxSeq int, e MoE) Model {
		return Model{Name: name, Family: Llama, Layers: layers, Hidden: hidden, Heads: heads, KVHeads: kv,
			FFN: ffn, Vocab: vocab, MaxSeq: maxSeq, MoE: &e}
	}
	mixtral := func(name string, layers, hidden, heads, ffn, maxSeq int) Model {
		return moeModel(name, layers, hidden, heads, 8, ffn, 32000, maxSeq,
			MoE{Experts: 8, TopK: 2, FFN: ffn, Score: "softmax"})
	}
	qwen3 := func(name string, layers, hidden, heads, ffn, moeFFN int) Model {
		m := moeModel(name, layers, hidden, heads, 4, ffn, 151936, 40960,
			MoE{Experts: 128, TopK: 8, FFN: moeFFN, Score: "softmax"})
		m.HeadDim, m.QKNorm = 128, true
		return m
	}
	dsv3 := moeModel("deepseek-v3", 61, 7168, 128, 128, 18432, 129280, 163840,
		MoE{Experts: 256, TopK: 8, FFN: 2048, SharedFFN: 2048, DenseFirst: 3, Score: "sigmoid", SelectionBias: true,
			Groups: 8, GroupTopK: 4})
	dsv3.MLA = &MLA{QRank: 1536, KVRank: 512, QKNope: 128, QKRope: 64, V: 128}
	dsv3.MTP = 1
	kimi := moeModel("kimi-k2", 61, 7168, 64, 64, 18432, 163840, 131072,
		MoE{Experts: 384, TopK: 8, FFN: 2048, SharedFFN: 2048, DenseFirst: 1, Score: "sigmoid", SelectionBias: true})
	mla := *dsv3.MLA
	kimi.MLA = &mla
	lite := moeModel("deepseek-v2-lite", 27, 2048, 16, 16, 10944, 102400, 163840,
		MoE{Experts: 64, TopK: 6, FFN: 1408, SharedFFN: 2816, DenseFirst: 1, Score: "softmax"})
	lite.MLA = &MLA{KVRank: 512, QKNope: 128, QKRope: 64, V: 128}
	oss := moeModel("gpt-oss-120b", 36, 2880, 64, 8, 2880, 201088, 131072,
		MoE{Experts: 128, TopK: 4, FFN: 2880, Score: "softmax", RouterBias: true, ExpertBias: true})
	oss.HeadDim, oss.AttnBias, oss.Sinks, oss.Window = 64, true, true, 128
	return []Model{
		mixtral("mixtral-8x7b", 32, 4096, 32, 14336, 32768),
		mixtral("mixtral-8x22b", 56, 6144, 48, 16384, 65536),
		qwen3("qwen3-30b-a3b", 48, 2048, 32, 6144, 768),
		qwen3("qwen3-235b-a22b", 94, 4096, 64, 12288, 1536),
		dsv3, kimi, lite, oss,
	}
}
