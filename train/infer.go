package train

import (
	"fmt"
	"io"
	"math"

	"trellis/checkpoint"
	"trellis/device"
	"trellis/model"
	"trellis/ops"
)

// SampleOptions configures SampleCheckpoint.
type SampleOptions struct {
	Checkpoint  string // a step directory, a checkpoint root (latest step) or a Hugging Face model directory
	Tokenizer   string // "" : the one the checkpoint records (or its vocabulary implies)
	Prompt      string
	Tokens      int
	Temperature float64
	TopK        int
	Seed        uint64
	Threads     int
	// Out, if set, receives the text as it is generated (SampleCheckpoint
	// then returns ""); nil collects it into the returned string.
	Out io.Writer
}

// MaxThreads bounds every thread-count flag: more goroutines than this
// only add scheduling overhead on any machine Trellis runs on.
const MaxThreads = 1024

// Validate checks the options as `trellis sample` flags, naming the flag
// and the rule.
func (o SampleOptions) Validate() error {
	switch {
	case o.Tokens < 0:
		return fmt.Errorf("--tokens=%d must be >= 0", o.Tokens)
	case math.IsNaN(o.Temperature) || math.IsInf(o.Temperature, 0) || o.Temperature < 0:
		return fmt.Errorf("--temperature=%g must be a finite number >= 0 (0: greedy)", o.Temperature)
	case o.TopK < 0:
		return fmt.Errorf("--top-k=%d must be >= 0 (0: all tokens)", o.TopK)
	case o.Threads < 0 || o.Threads > MaxThreads:
		return fmt.Errorf("--threads=%d must be in [0, %d] (0: all CPUs)", o.Threads, MaxThreads)
	}
	return nil
}

// SampleCheckpoint loads the weights of a checkpoint written under any plan
// (they are indexed by tensor, whatever the sharding) onto one device and
// continues the prompt.
func SampleCheckpoint(o SampleOptions) (string, error) {
	if err := o.Validate(); err != nil {
		return "", err
	}
	k, err := ops.New(ops.Config{Threads: o.Threads})
	if err != nil {
		return "", err
	}
	// The weights, their gradients (NewFlatParams holds both) and a runner
	// for one sequence, against the machine's memory, before allocating.
	fits := func(cfg model.Config) error {
		need := 8*cfg.ParamCount() + model.RunnerBytes(cfg, 1, min(k.Threads(), cfg.KV())) + layerBookkeeping*float64(cfg.Layers)
		if phys := physicalMemory(); need >= 1<<62 || (phys > 0 && need > float64(phys)) {
			return fmt.Errorf("the model (%v) needs at least %s to sample, more than this machine's memory, %s",
				cfg, fmtEstimate(need), device.FormatBytes(phys))
		}
		return nil
	}
	ws, err := LoadWeights(o.Checkpoint, fits)
	if err != nil {
		return "", err
	}
	tok, err := ws.tokenizerFor(o.Tokenizer)
	if err != nil {
		return "", err
	}
	cfg := ws.Model
	dev := device.New(device.Config{})
	fp, err := model.NewFlatParams(cfg, dev)
	if err != nil {
		return "", err
	}
	copy(fp.W, ws.W)
	gpt, err := model.New(model.Options{Model: cfg, Kernels: k, Device: dev, MicroBatch: 1})
	if err != nil {
		return "", err
	}
	if err := setExpertBias(gpt, ws.ExpertBias); err != nil {
		return "", err
	}
	st, err := gpt.NewStash()
	if err != nil {
		return "", err
	}
	return Generate(GenerateConfig{GPT: gpt, Params: fp, Stash: st, Tokenizer: tok, Prompt: o.Prompt,
		Tokens: o.Tokens, Temperature: o.Temperature, TopK: o.TopK, Seed: o.Seed, Out: o.Out})
}

// LoadMeta reads the trainer's metadata of a checkpoint (its job, step and
// data position), checking its index and its files' sizes and headers
// (checkpoint.OpenRanges: the data is verified by whoever reads it).
func LoadMeta(path string) (Meta, error) {
	var m Meta
	c, err := checkpoint.OpenRanges(path)
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
