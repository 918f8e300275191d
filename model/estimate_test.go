package model

import (
	"math"
	"strings"
	"testing"

	"trellis/device"
	"trellis/ops"
)

// TestRunnerBytesMatchesAllocation holds the formulas to what New and
// NewStash really charge, so that a pre-allocation estimate built on them
// is the accounting, not a guess.
func TestRunnerBytesMatchesAllocation(t *testing.T) {
	for _, c := range []struct {
		cfg     Config
		B, thr  int
		dropout float64
	}{
		{Config{Layers: 2, Hidden: 32, Heads: 2, SeqLen: 16, Vocab: 64}, 2, 1, 0},
		{Config{Layers: 1, Hidden: 16, Heads: 4, SeqLen: 8, Vocab: 300}, 3, 2, 0.1},
		{Config{Layers: 3, Hidden: 64, Heads: 8, SeqLen: 4, Vocab: 16}, 1, 4, 0},
	} {
		cfg := c.cfg
		cfg.Dropout = c.dropout
		k, err := ops.New(ops.Config{Threads: c.thr})
		if err != nil {
			t.Fatal(err)
		}
		dev := device.New(device.Config{})
		gpt, err := New(Options{Model: cfg, Kernels: k, Device: dev, MicroBatch: c.B})
		if err != nil {
			t.Fatal(err)
		}
		st, err := gpt.NewStash()
		if err != nil {
			t.Fatal(err)
		}
		workers := max(1, min(k.Threads(), c.B*cfg.Heads))
		if got, want := cfg.RunnerBytes(c.B, workers), float64(dev.Stats().LiveTotal); got != want {
			t.Errorf("%v B=%d: RunnerBytes = %v, device holds %v", cfg, c.B, got, want)
		}
		if got, want := cfg.ParamCount(), float64(cfg.NumParams()); got != want {
			t.Errorf("%v: ParamCount = %v, NumParams = %v", cfg, got, want)
		}
		st.Free()
		gpt.Free()
	}
}

// TestValidateOverflow: a parameter count beyond int64 is a validation
// error naming the fields, not a wrapped count that sizes a slice.
func TestValidateOverflow(t *testing.T) {
	for _, cfg := range []Config{
		{Layers: 1 << 62, Hidden: 256, Heads: 4, SeqLen: 128, Vocab: 256},
		{Layers: 4, Hidden: 1 << 32, Heads: 4, SeqLen: 128, Vocab: 256},
		{Layers: 4, Hidden: 256, Heads: 4, SeqLen: 128, Vocab: math.MaxInt64},
	} {
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), "more parameters than a 64-bit count holds") || !strings.Contains(err.Error(), "layers=") {
			t.Errorf("%v: Validate() = %v", cfg, err)
		}
		if p := cfg.ParamCount(); !(p > 1e18) {
			t.Errorf("%v: ParamCount = %v", cfg, p)
		}
	}
}

func TestConfigString(t *testing.T) {
	got := Config{Layers: 1, Hidden: 32, Heads: 2, SeqLen: 16, Vocab: 256}.String()
	if want := "layers=1 hidden=32 heads=2 seq_len=16 vocab=256 dropout=0"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
