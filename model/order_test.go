package model

import (
	"fmt"
	"slices"
	"testing"

	"trellis/device"
	"trellis/ops"
	"trellis/tensor"
)

// callLog is a Params that records the units Weights is asked for.
type callLog struct {
	*FlatParams
	calls []int
}

func (c *callLog) Weights(u int) (tensor.Buf, error) {
	c.calls = append(c.calls, u)
	return c.FlatParams.Weights(u)
}

// WeightOrder is the order the model really asks for weights in: a
// training micro-batch's forward then backward, and an evaluation pass's
// forward, under every precision, attention kernel and recomputation mode.
func TestWeightOrder(t *testing.T) {
	for _, cfg := range []Config{{Layers: 3, Hidden: 8, Heads: 2, SeqLen: 4, Vocab: 11, Dropout: 0.1}, tinyLlama, tinyLlamaTied} {
		t.Run(cfg.ArchName()+fmt.Sprint("/tied=", cfg.Tied()), func(t *testing.T) { weightOrder(t, cfg) })
	}
}

func weightOrder(t *testing.T, cfg Config) {
	T := cfg.SeqLen
	fwd, bwd := cfg.WeightOrder()
	train := append(slices.Clone(fwd), bwd...)
	for _, pol := range policies {
		for _, flash := range []bool{false, true} {
			for _, rc := range []Recompute{RecomputeNone, RecomputeSelective, RecomputeFull} {
				name := fmt.Sprintf("%v flash=%v recompute=%v", pol, flash, rc)
				k, err := ops.New(ops.Config{Threads: 1})
				if err != nil {
					t.Fatal(err)
				}
				dev := device.New(device.Config{})
				gpt, err := New(Options{Model: cfg, Kernels: k, Device: dev, MicroBatch: 1, Flash: flash, Recompute: rc, Precision: pol})
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				st, err := gpt.NewStash()
				if err != nil {
					t.Fatal(err)
				}
				fp, err := NewPartParams(cfg, Part{}, pol, dev)
				if err != nil {
					t.Fatal(err)
				}
				p := &callLog{FlatParams: fp}
				b := Batch{Inputs: make([]int32, T), Targets: make([]int32, T)}
				if _, err := gpt.Forward(p, st, b); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if err := gpt.Backward(p, st, 1); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if !slices.Equal(p.calls, train) {
					t.Errorf("%s: a training micro-batch asks for %v, WeightOrder says %v", name, p.calls, train)
				}
				p.calls = nil
				if _, err := gpt.EvalForward(p, st, b); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if !slices.Equal(p.calls, fwd) {
					t.Errorf("%s: an evaluation pass asks for %v, WeightOrder says %v", name, p.calls, fwd)
				}
				gpt.Free()
			}
		}
	}
}
