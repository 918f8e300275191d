package train

import (
	"bytes"
	"context"
	"errors"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"trellis/data"
	"trellis/device"
	"trellis/model"
	"trellis/ops"
)

// TestSizeOverflowIsAnError: batch and model sizes whose products wrap an
// int64 are validation errors naming the fields, never a panic or a
// wrapped length (the loader used to panic on micro_batch=global_batch=2^62).
func TestSizeOverflowIsAnError(t *testing.T) {
	const huge = 1 << 62
	for _, c := range []struct {
		name string
		edit func(*Job)
		want string
	}{
		{"micro and global batch 2^62", func(j *Job) { j.Train.MicroBatch, j.Train.GlobalBatch = huge, huge }, "train.micro_batch=4611686018427387904 overflows"},
		{"micro batch × seq_len", func(j *Job) { j.Parallel.Plan = "dp=1"; j.Train.MicroBatch, j.Train.GlobalBatch = 1<<60, 1<<60 }, "× model.seq_len=16 overflows"},
		{"steps × global batch", func(j *Job) { j.Train.Steps, j.Train.GlobalBatch = huge, 1<<20 }, "train.steps=4611686018427387904 × train.global_batch=1048576 overflows"},
		{"layers 2^62", func(j *Job) { j.Model.Layers = huge }, "more parameters than a 64-bit count holds"},
		{"bucket 1e30", func(j *Job) { j.Parallel.BucketSize = "1e30" }, `parallel.bucket_size: bad size "1e30": larger than`},
		{"threads", func(j *Job) { j.Train.Threads = 5000 }, "train.threads=5000 must be at most 1024"},
		{"sample_len", func(j *Job) { j.Train.SampleLen = 1 << 40 }, "train.sample_len=1099511627776 must be at most 1048576"},
		{"budget half a byte", func(j *Job) { j.Parallel.DeviceMemory = "0.5" }, `parallel.device_memory: bad size "0.5": less than one byte`},
	} {
		j := tinyJob("dp=2,zero=3")
		c.edit(&j)
		err := j.Check()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Check() = %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

// TestMemoryEstimateRefuses: a job whose state and activations cannot fit
// the machine is refused with the numbers before anything is allocated;
// a device budget bounds what is counted (the device refuses beyond it,
// before allocating); the per-layer bookkeeping is counted regardless.
func TestMemoryEstimateRefuses(t *testing.T) {
	const gib = int64(1) << 30
	for _, c := range []struct {
		name   string
		edit   func(*Job)
		phys   int64
		refuse bool
	}{
		{"tiny job", func(*Job) {}, gib, false},
		{"vocab 1e8, no budget", func(j *Job) { j.Model.Vocab = 100_000_000 }, 24 * gib, true},
		{"vocab 1e8 under a 1 GiB budget", func(j *Job) { j.Model.Vocab = 100_000_000; j.Parallel.DeviceMemory = "1GiB" }, 24 * gib, false},
		{"vocab 1e8, budget above the machine", func(j *Job) { j.Model.Vocab = 100_000_000; j.Parallel.DeviceMemory = "1TiB" }, 24 * gib, true},
		{"layers 1e8 under a budget", func(j *Job) { j.Model.Layers = 100_000_000; j.Parallel.DeviceMemory = "1GiB" }, 24 * gib, true},
		{"unknown machine", func(j *Job) { j.Model.Vocab = 100_000_000 }, 0, false},
		{"unknown machine, beyond any", func(j *Job) { j.Model.Vocab, j.Model.SeqLen = 1<<40, 1<<20 }, 0, true},
		{"tcp counts one rank", func(j *Job) { j.Model.Vocab = 1_000_000; j.Parallel.Backend = "tcp" }, 1 * gib, false},
		{"local counts every rank", func(j *Job) { j.Model.Vocab = 1_000_000 }, 1 * gib, true},
	} {
		j := tinyJob("dp=2")
		c.edit(&j)
		s := settingsOf(t, j)
		err := j.checkMemory(s, c.phys)
		if c.refuse != (err != nil) {
			t.Errorf("%s: checkMemory = %v, want refused=%v", c.name, err, c.refuse)
			continue
		}
		if err != nil && !strings.Contains(err.Error(), "more than any machine") && (!strings.Contains(err.Error(), "more than this machine's memory") || !strings.Contains(err.Error(), "needs at least")) {
			t.Errorf("%s: message %q lacks the numbers", c.name, err)
		}
	}
	// Through Check, on this machine: a typo'd layer count is refused at once.
	j := tinyJob("dp=1")
	j.Model.Layers = 100_000_000
	j.Model.Hidden = 1024
	if err := j.Check(); err == nil || !strings.Contains(err.Error(), "more than this machine's memory") {
		t.Errorf("layers=1e8: Check() = %v", err)
	}
}

// settingsOf resolves j's [parallel] section on the tiny model, whose
// memory fits any machine: the settings of j without its memory check.
func settingsOf(t *testing.T, j Job) settings {
	t.Helper()
	base := tinyJob(j.Parallel.Plan)
	base.Parallel = j.Parallel
	s, err := base.resolve()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestOOMHintAllocatesNothing: the hint of a job far beyond its budget is
// computed from formulas (it used to build the model with no budget and
// die of a real out-of-memory).
func TestOOMHintAllocatesNothing(t *testing.T) {
	j := tinyJob("dp=1")
	j.Model = model.Config{Layers: 4, Hidden: 256, Heads: 4, SeqLen: 128, Vocab: 100_000_000}
	j.Parallel.DeviceMemory = "1GiB"
	s := settingsOf(t, j)
	oom := &device.OOMError{Tag: device.Param, Request: 1 << 40, Budget: s.budget}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := oomHint(oom, j, s)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, device.ErrOutOfMemory) || !strings.Contains(err.Error(), "no ZeRO-3 plan of up to 64 devices fits 1.00 GiB") {
		t.Errorf("hint: %v", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
		t.Errorf("the hint allocated %d bytes", grew)
	}
}

// TestCancelReachesInnerLoops: a step of 2^20 micro-batches (hours of
// work) ends soon after its context is cancelled, with an error that says
// so, on one device and under ZeRO-3 (whose peers must not wait for the
// collective timeout).
func TestCancelReachesInnerLoops(t *testing.T) {
	for _, plan := range []string{"dp=1", "dp=2,zero=3"} {
		j := tinyJob(plan)
		j.Train.MicroBatch, j.Train.GlobalBatch, j.Train.Steps, j.Train.Warmup = 1, 1<<20, 1, 0
		j.Parallel.Timeout = "10m" // a rank left waiting on a peer would hang the test
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := Run(ctx, Options{Job: j})
			done <- err
		}()
		time.Sleep(300 * time.Millisecond)
		cancel()
		select {
		case err := <-done:
			// Cancelled between steps or (the point: a step here is
			// hours of micro-batches) inside one.
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s: Run = %v, want an interruption", plan, err)
			}
		case <-time.After(2 * time.Minute): // a hang detector, not a speed target
			t.Fatalf("%s: Run did not return after cancellation", plan)
		}
	}
}

// TestCtxParamsStopsBetweenUnits: the model sees a cancelled run at its
// next unit, without reaching the strategy.
func TestCtxParamsStopsBetweenUnits(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p := ctxParams{Params: nil, ctx: ctx} // a nil strategy: any call through would panic
	if _, err := p.Weights(3); !errors.Is(err, context.Canceled) {
		t.Errorf("Weights: %v", err)
	}
	if _, err := p.Grads(3); !errors.Is(err, context.Canceled) {
		t.Errorf("Grads: %v", err)
	}
}

// TestGenerateStreams: with Out set, Generate writes the same text as it
// returns without (token by token, holding only the context window), for
// more tokens than the context holds.
func TestGenerateStreams(t *testing.T) {
	cfg := model.Config{Layers: 1, Hidden: 16, Heads: 2, SeqLen: 8, Vocab: 256}
	k, err := ops.New(ops.Config{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	dev := device.New(device.Config{})
	fp, err := model.NewFlatParams(cfg, dev)
	if err != nil {
		t.Fatal(err)
	}
	for i := range fp.W {
		fp.W[i] = float32(math.Sin(float64(i))) * 0.5
	}
	gpt, err := model.New(model.Options{Model: cfg, Kernels: k, Device: dev, MicroBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	st, err := gpt.NewStash()
	if err != nil {
		t.Fatal(err)
	}
	tok, err := data.NewTokenizer(data.ByteName)
	if err != nil {
		t.Fatal(err)
	}
	gc := GenerateConfig{GPT: gpt, Params: fp, Stash: st, Tokenizer: tok, Prompt: "It is", Tokens: 40, Temperature: 1, TopK: 20, Seed: 7}
	want, err := Generate(gc)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	gc.Out = &out
	got, err := Generate(gc)
	if err != nil || got != "" || out.String() != want || len(want) != 40 {
		t.Errorf("streamed %q (returned %q, %v), collected %q", out.String(), got, err, want)
	}
}

// TestSampleOptionsValidate names the flag and the rule.
func TestSampleOptionsValidate(t *testing.T) {
	good := SampleOptions{Tokens: 10, Temperature: 0.8, TopK: 40}
	for _, c := range []struct {
		edit func(*SampleOptions)
		want string
	}{
		{func(o *SampleOptions) { o.Temperature = math.NaN() }, "--temperature=NaN must be a finite number >= 0"},
		{func(o *SampleOptions) { o.Temperature = math.Inf(1) }, "--temperature=+Inf must be a finite number >= 0"},
		{func(o *SampleOptions) { o.Temperature = -1 }, "--temperature=-1"},
		{func(o *SampleOptions) { o.Tokens = -1 }, "--tokens=-1 must be >= 0"},
		{func(o *SampleOptions) { o.TopK = -1 }, "--top-k=-1 must be >= 0"},
		{func(o *SampleOptions) { o.Threads = 100000 }, "--threads=100000 must be in [0, 1024]"},
	} {
		o := good
		c.edit(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate() = %v, want %q", err, c.want)
		}
	}
	if err := good.Validate(); err != nil {
		t.Errorf("good options: %v", err)
	}
}
