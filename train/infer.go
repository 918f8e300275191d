package train

import (
	"fmt"

	"trellis/checkpoint"
	"trellis/data"
	"trellis/device"
	"trellis/model"
	"trellis/ops"
	"trellis/parallel/flat"
)

// SampleOptions configures SampleCheckpoint.
type SampleOptions struct {
	Checkpoint  string // a step directory or a checkpoint root (latest step)
	Prompt      string
	Tokens      int
	Temperature float64
	TopK        int
	Seed        uint64
	Threads     int
}

// SampleCheckpoint loads the weights of a checkpoint written under any plan
// (they are indexed by tensor, whatever the sharding) onto one device and
// continues the prompt.
func SampleCheckpoint(o SampleOptions) (string, error) {
	if o.Tokens < 0 {
		return "", fmt.Errorf("--tokens=%d must be >= 0", o.Tokens)
	}
	if o.Temperature < 0 {
		return "", fmt.Errorf("--temperature=%g must be >= 0", o.Temperature)
	}
	if o.TopK < 0 {
		return "", fmt.Errorf("--top-k=%d must be >= 0", o.TopK)
	}
	c, err := checkpoint.Open(o.Checkpoint)
	if err != nil {
		return "", err
	}
	var m Meta
	if err := c.DecodeMeta(&m); err != nil {
		return "", err
	}
	cfg := m.Job.Model
	if err := cfg.Validate(); err != nil {
		return "", fmt.Errorf("%s: %w", c.Dir(), err)
	}
	tok, err := data.NewTokenizer(m.Job.Data.Tokenizer)
	if err != nil {
		return "", err
	}
	dev := device.New(device.Config{})
	k, err := ops.New(ops.Config{Threads: o.Threads})
	if err != nil {
		return "", err
	}
	fp, err := model.NewFlatParams(cfg, dev)
	if err != nil {
		return "", err
	}
	if err := flat.Read(c, flat.TensorsOf(cfg.Layout()), "", 0, fp.W); err != nil {
		return "", err
	}
	gpt, err := model.New(model.Options{Model: cfg, Kernels: k, Device: dev, MicroBatch: 1})
	if err != nil {
		return "", err
	}
	st, err := gpt.NewStash()
	if err != nil {
		return "", err
	}
	return Generate(GenerateConfig{GPT: gpt, Params: fp, Stash: st, Tokenizer: tok, Prompt: o.Prompt,
		Tokens: o.Tokens, Temperature: o.Temperature, TopK: o.TopK, Seed: o.Seed})
}

// LoadMeta reads the trainer's metadata of a checkpoint (its job, step and
// data position), verifying the checkpoint first.
func LoadMeta(path string) (Meta, error) {
	var m Meta
	c, err := checkpoint.Open(path)
	if err != nil {
		return m, err
	}
	err = c.DecodeMeta(&m)
	return m, err
}

// Check validates a job without running it.
func (j Job) Check() error {
	j, err := j.Normalized()
	if err != nil {
		return err
	}
	_, err = j.resolve()
	return err
}
