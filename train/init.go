package train

import (
	"fmt"
	"log/slog"

	"trellis/hf"
	"trellis/model"
	"trellis/parallel"
)

// checkInit validates [model] init before anything runs: the path is a
// Hugging Face GPT-2 or Llama model whose config.json gives this job's
// shape (its weights are read by loadInit, once per process, when the run
// starts).
func (j Job) checkInit() error {
	if j.Model.Init == "" {
		return nil
	}
	got, _, err := hf.ReadConfig(j.Model.Init)
	if err != nil {
		return fmt.Errorf("model.init: %w", err)
	}
	return sameShape(j.Model, got, "model.init="+j.Model.Init)
}

// sameShape names the first field where the two models differ: the
// architecture and every size (a Llama's keys, defaults spelled out; an
// MoE Llama's experts, top_k, widths and MoE layers — not its capacity
// factor and aux loss, which are the job's training choices),
// seq_len too for GPT-2 (its positions are weights); a Llama's
// max_position_embeddings only bounds the job's seq_len.
func sameShape(want, got model.Config, what string) error {
	w, g := want.Canonical(), got.Canonical()
	if w.ArchName() != g.ArchName() {
		return fmt.Errorf("%s is arch=%s, the job's model.arch=%s", what, g.ArchName(), w.ArchName())
	}
	for _, f := range []struct {
		name string
		w, g int
	}{{"layers", w.Layers, g.Layers}, {"hidden", w.Hidden, g.Hidden}, {"heads", w.Heads, g.Heads},
		{"kv_heads", w.KVHeads, g.KVHeads}, {"ffn_hidden", w.FFN, g.FFN}, {"vocab", w.Vocab, g.Vocab},
		{"experts", w.Experts, g.Experts}, {"top_k", w.TopK, g.TopK}, {"expert_ffn_hidden", w.ExpertFFN, g.ExpertFFN},
		{"shared_experts", w.SharedExperts, g.SharedExperts}} {
		if f.w != f.g {
			return fmt.Errorf("%s has %s=%d, the job's model.%s=%d", what, f.name, f.g, f.name, f.w)
		}
	}
	kind := map[bool]string{false: "dense", true: "an MoE layer"}
	for l := 0; l < w.Layers; l++ {
		if w.MoELayer(l) != g.MoELayer(l) {
			return fmt.Errorf("%s's layer %d is %s, the job's is %s (model.dense_first=%d, model.moe_every=%d)", what, l, kind[g.MoELayer(l)], kind[w.MoELayer(l)], w.DenseFirst, w.MoEEvery)
		}
	}
	switch {
	case w.RouterScore != g.RouterScore:
		return fmt.Errorf("%s has router_score=%s, the job's model.router_score=%s", what, g.RouterScore, w.RouterScore)
	case !w.IsLlama() && w.SeqLen != g.SeqLen:
		return fmt.Errorf("%s has seq_len=%d, the job's model.seq_len=%d", what, g.SeqLen, w.SeqLen)
	case w.IsLlama() && w.SeqLen > g.SeqLen:
		return fmt.Errorf("%s has max_position_embeddings=%d, below the job's model.seq_len=%d", what, g.SeqLen, w.SeqLen)
	case w.RopeTheta != g.RopeTheta:
		return fmt.Errorf("%s has rope_theta=%g, the job's model.rope_theta=%g", what, g.RopeTheta, w.RopeTheta)
	case w.NormEps != g.NormEps:
		return fmt.Errorf("%s has norm_eps=%g, the job's model.norm_eps=%g", what, g.NormEps, w.NormEps)
	case w.Tied() != g.Tied():
		return fmt.Errorf("%s has tie_embeddings=%v, the job's model.tie_embeddings=%v", what, g.Tied(), w.Tied())
	}
	return nil
}

// loadInit reads [model] init's weights (nil without one).
func (j Job) loadInit(log *slog.Logger) ([]float32, error) {
	if j.Model.Init == "" {
		return nil, nil
	}
	m, err := hf.Read(j.Model.Init)
	if err != nil {
		return nil, fmt.Errorf("model.init: %w", err)
	}
	if err := sameShape(j.Model, m.Config, "model.init="+j.Model.Init); err != nil {
		return nil, err
	}
	if log != nil {
		log.Info("init", "from", j.Model.Init, "params", len(m.W))
	}
	return m.W, nil
}

// initWeights writes a fresh run's initial weights: the architecture's
// initialisation from seed, or the global weights w of [model] init.
func initWeights(st parallel.Strategy, seed uint64, w []float32) error {
	return st.Init(model.Init{Seed: seed, Weights: w})
}
