package plan

import "fmt"

// MegatronModel is the model Megatron-LM arguments state, for `trellis
// plan --from megatron` without --model: --num-layers, --hidden-size,
// --num-attention-heads (required), --ffn-hidden-size (4·hidden),
// --group-query-attention with --num-query-groups, --normalization
// RMSNorm with --swiglu (a Llama; else GPT), --position-embedding-type
// rope (relative positions), --untie-embeddings-and-output-weights,
// --disable-bias-linear, --vocab-size (or GPT2BPETokenizer's 50257),
// --max-position-embeddings (else --seq-length). A model with experts or
// latent attention needs --model.
func MegatronModel(text string) (Model, error) {
	g, _, err := readMegatron(text)
	if err != nil {
		return Model{}, err
	}
	for _, f := range []string{"--num-experts", "--multi-latent-attention"} {
		if g.has(f) {
			return Model{}, fmt.Errorf("plan: megatron arguments: %s: a model with experts or latent attention is not read from the arguments; give --model", f)
		}
	}
	m := Model{Name: "megatron-args", Family: GPT, Tied: !g.has("--untie-embeddings-and-output-weights")}
	for _, c := range []struct {
		flag string
		dst  *int
	}{{"--num-layers", &m.Layers}, {"--hidden-size", &m.Hidden}, {"--num-attention-heads", &m.Heads}} {
		if !g.has(c.flag) {
			return Model{}, fmt.Errorf("plan: megatron arguments: no %s: give it, or the model with --model", c.flag)
		}
		if *c.dst, err = g.int(c.flag, 0); err != nil {
			return Model{}, err
		}
	}
	rms, swiglu := g["--normalization"] == "RMSNorm", g.has("--swiglu")
	switch {
	case rms && swiglu:
		m.Family = Llama
	case rms || swiglu:
		return Model{}, fmt.Errorf("plan: megatron arguments: --normalization %q with --swiglu=%v: the planner reads LayerNorm + GELU (GPT) or RMSNorm + SwiGLU (Llama); give --model", g["--normalization"], swiglu)
	}
	// Megatron's dropouts default to 0.1: masks unless both are 0.
	m.Dropout = !(g["--attention-dropout"] == "0" || g["--attention-dropout"] == "0.0") || !(g["--hidden-dropout"] == "0" || g["--hidden-dropout"] == "0.0")
	m.AttnBias = !g.has("--disable-bias-linear")
	m.MLPBias = m.AttnBias
	m.RelPos = m.Family == GPT && g["--position-embedding-type"] == "rope"
	if m.FFN, err = g.int("--ffn-hidden-size", 4*m.Hidden); err != nil {
		return Model{}, err
	}
	m.KVHeads = m.Heads
	if g.has("--group-query-attention") {
		if m.KVHeads, err = g.int("--num-query-groups", m.Heads); err != nil {
			return Model{}, err
		}
	}
	switch {
	case g.has("--vocab-size"):
		if m.Vocab, err = g.int("--vocab-size", 0); err != nil {
			return Model{}, err
		}
	case g["--tokenizer-type"] == "GPT2BPETokenizer":
		m.Vocab = 50257
	default:
		return Model{}, fmt.Errorf("plan: megatron arguments: no --vocab-size (and no --tokenizer-type GPT2BPETokenizer): give it, or the model with --model")
	}
	if m.MaxSeq, err = g.int("--max-position-embeddings", 0); err != nil {
		return Model{}, err
	}
	if m.MaxSeq == 0 {
		if m.MaxSeq, err = g.int("--seq-length", 0); err != nil {
			return Model{}, err
		}
	}
	if err := m.Validate(); err != nil {
		return Model{}, fmt.Errorf("plan: megatron arguments: %w", err)
	}
	return m, nil
}
