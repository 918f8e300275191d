package train

import (
	"fmt"

	"trellis/checkpoint"
	"trellis/data"
	"trellis/hf"
	"trellis/model"
	"trellis/parallel/flat"
)

// Weights is a model's configuration and global weights (the flat vector
// in Model.Layout() order), read from a checkpoint of any plan or from a
// Hugging Face GPT-2 directory.
type Weights struct {
	Model     model.Config
	Tokenizer string // data.Config.Tokenizer of the run that trained it ("" if unknown)
	Step      int    // optimizer steps of a checkpoint (0 for a Hugging Face model)
	Source    string // the path read
	W         []float32
	// ExpertBias are a checkpoint's MoE blocks' expert biases by block
	// (model.router_expert_bias; nil without), which select its routing.
	ExpertBias map[int][]float32
}

// LoadWeights reads path: a Hugging Face model directory (config.json and
// model.safetensors) or a Trellis checkpoint (a step directory or a
// checkpoint root), verifying it. check, if not nil, is called with the
// model configuration before the weights are read (to refuse a model that
// cannot fit, or does not match).
func LoadWeights(path string, check func(model.Config) error) (Weights, error) {
	if hf.IsModelDir(path) {
		return loadHF(path, check)
	}
	c, err := checkpoint.Open(path)
	if err != nil {
		return Weights{}, err
	}
	var m Meta
	if err := c.DecodeMeta(&m); err != nil {
		return Weights{}, err
	}
	cfg := m.Job.Model
	if err := cfg.Validate(); err != nil {
		return Weights{}, fmt.Errorf("%s: %w", c.Dir(), err)
	}
	if check != nil {
		if err := check(cfg); err != nil {
			return Weights{}, fmt.Errorf("%s: %w", c.Dir(), err)
		}
	}
	lay := cfg.Layout()
	w := make([]float32, lay.Size)
	if err := flat.Read(c, flat.TensorsOf(lay), "", 0, w); err != nil {
		return Weights{}, err
	}
	bias, err := readExpertBias(c, cfg)
	if err != nil {
		return Weights{}, err
	}
	return Weights{Model: cfg, Tokenizer: m.Job.Data.Tokenizer, Step: m.Step, Source: c.Dir(), W: w, ExpertBias: bias}, nil
}

func loadHF(path string, check func(model.Config) error) (Weights, error) {
	cfg, _, err := hf.ReadConfig(path)
	if err != nil {
		return Weights{}, err
	}
	if check != nil {
		if err := check(cfg); err != nil {
			return Weights{}, fmt.Errorf("%s: %w", path, err)
		}
	}
	m, err := hf.Read(path)
	if err != nil {
		return Weights{}, err
	}
	return Weights{Model: m.Config, Tokenizer: m.Meta[hf.MetaTokenizer], Source: path, W: m.W}, nil
}

// tokenizerFor is the tokenizer of w: the one recorded, else the one its
// vocabulary implies (GPT-2's 50,257 ids, the byte tokenizer's 256), else
// an error asking for it.
func (w Weights) tokenizerFor(override string) (data.Tokenizer, error) {
	name := override
	switch {
	case name != "":
	case w.Tokenizer != "":
		name = w.Tokenizer
	case w.Model.Vocab == 50257:
		name = "gpt2"
	case w.Model.Vocab == 256:
		name = "byte"
	default:
		return nil, fmt.Errorf("%s: the model's tokenizer is not recorded and vocab=%d implies none: pass --tokenizer byte|gpt2", w.Source, w.Model.Vocab)
	}
	return data.NewTokenizer(name)
}
