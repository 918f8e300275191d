package train

import (
	"fmt"
	"log/slog"

	"trellis/hf"
	"trellis/model"
	"trellis/parallel"
)

// checkInit validates [model] init before anything runs: the path is a
// Hugging Face GPT-2 model whose config.json gives this job's shape (its
// weights are read by loadInit, once per process, when the run starts).
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

// sameShape names the first field where the two models' shapes differ.
func sameShape(want, got model.Config, what string) error {
	for _, f := range []struct {
		name string
		w, g int
	}{{"layers", want.Layers, got.Layers}, {"hidden", want.Hidden, got.Hidden}, {"heads", want.Heads, got.Heads},
		{"seq_len", want.SeqLen, got.SeqLen}, {"vocab", want.Vocab, got.Vocab}} {
		if f.w != f.g {
			return fmt.Errorf("%s has %s=%d, the job's model.%s=%d", what, f.name, f.g, f.name, f.w)
		}
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

// initWeights writes a fresh run's initial weights: GPT-2's initialisation
// from seed, or the global weights w of [model] init.
func initWeights(st parallel.Strategy, seed uint64, w []float32) error {
	return st.Init(model.Init{Seed: seed, Weights: w})
}
