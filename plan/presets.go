package plan

// heldOutPresets are the models of the published large runs that
// docs/PLANNER.md ("Held-out validation") holds the planner against; none
// of them was used to set a constant.
//
//   - bloom-176b: BigScience BLOOM (Le Scao et al. 2022; bigscience
//     train/tr11-176B-ml): 70 layers, h = 14336, 112 heads, vocabulary
//     250,880 (padded), ALiBi positions (no position table), a LayerNorm on
//     the embedding, tied output layer; 176,247,271,424 parameters.
//   - opt-175b: Meta OPT-175B (Zhang et al. 2022, Table 1): 96 layers,
//     h = 12288, 96 heads, vocabulary 50,272, 2,050 learned positions (OPT
//     offsets them by 2), tied; ReLU MLP of 4h (costed as GELU's).
//   - gpt-neox-20b: EleutherAI GPT-NeoX-20B (Black et al. 2022; gpt-neox
//     configs/20B.yml): 44 layers, h = 6144, 64 heads, vocabulary 50,432,
//     rotary positions, untied, no dropout; 20,554,567,680 parameters.
//     (Its parallel attention+MLP residual has the same matrices and
//     activations as the sequential block to within a LayerNorm input.)
//   - mt-nlg-530b: Megatron-Turing NLG 530B (Smith et al. 2022): the
//     megatron-530b shape (105 layers, h = 20480, 128 heads, vocabulary
//     51,200, 2,048 learned positions, tied).
//   - mcore-*: the GPT models of Megatron-LM's H100 weak-scaling table
//     (README "Training Speed and Scalability", images/model_table.png,
//     Megatron-Core r0.8.0, July 2024): vocabulary 131,072, sequence 4096,
//     MLP 4h, untied (the 177B "has slightly more than 175 billion
//     parameters due to larger vocabulary size").
//   - llama2-*: Meta Llama 2 (Touvron et al. 2023; Hugging Face
//     config.json), vocabulary 32,000.
//   - mpt-70b: the 70B model of MosaicML llm-foundry's throughput tables
//     (scripts/train/benchmarking/README.md, yamls/mpt-70b): 80 layers,
//     h = 8192, 64 heads, MLP 4h, vocabulary 50,368, 2,048 learned
//     positions, tied, no biases, no dropout; 64,855,220,224 parameters
//     (the table's 64,862,437,376, within 0.02%).
func heldOutPresets() []Model {
	bloom := gptModel("bloom-176b", 70, 14336, 112, 250880, 2048, true)
	bloom.RelPos, bloom.EmbedNorm = true, true
	neox := gptModel("gpt-neox-20b", 44, 6144, 64, 50432, 2048, false)
	neox.RelPos, neox.Dropout = true, false
	ps := []Model{
		bloom,
		gptModel("opt-175b", 96, 12288, 96, 50272, 2050, true),
		neox,
		gptModel("mt-nlg-530b", 105, 20480, 128, 51200, 2048, true),
	}
	for _, c := range []struct {
		name                  string
		layers, hidden, heads int
	}{
		{"mcore-1.7b", 24, 2048, 16}, {"mcore-7.1b", 30, 4096, 32}, {"mcore-16b", 32, 6144, 48},
		{"mcore-32b", 48, 7168, 56}, {"mcore-70b", 84, 8192, 64}, {"mcore-119b", 92, 10240, 80},
		{"mcore-177b", 96, 12288, 96}, {"mcore-314b", 96, 16384, 128}, {"mcore-462b", 112, 18432, 144},
	} {
		ps = append(ps, gptModel(c.name, c.layers, c.hidden, c.heads, 131072, 4096, false))
	}
	l2 := func(name string, layers, hidden, heads, kv, ffn int) Model {
		m := llamaModel(name, layers, hidden, heads, kv, ffn)
		m.Vocab, m.MaxSeq = 32000, 4096
		return m
	}
	mpt := gptModel("mpt-70b", 80, 8192, 64, 50368, 2048, true)
	mpt.AttnBias, mpt.MLPBias, mpt.Dropout = false, false, false
	return append(ps, l2("llama2-7b", 32, 4096, 32, 32, 11008), l2("llama2-13b", 40, 5120, 40, 40, 13824),
		l2("llama2-70b", 80, 8192, 64, 8, 28672), mpt)
}
