package model

import (
	"math/rand/v2"
	"testing"

	"trellis/device"
	"trellis/ops"
	"trellis/precision"
)

// tiny is the configuration of the whole-model tests.
var tiny = Config{Layers: 2, Hidden: 8, Heads: 2, SeqLen: 5, Vocab: 11}

// setup builds a model, flat parameters (initialised with seed 1, plus
// noise so that no gradient vanishes by symmetry) and one stash.
func setup(t testing.TB, cfg Config, B, threads int) (*GPT, *FlatParams, *Stash, *device.Device) {
	t.Helper()
	return setupOn(t, cfg, B, threads, Options{})
}

// setupOn is setup with o's Precision, Flash and Recompute (the rest of o
// is set here); the parameters follow the policy (FlatParams.Sync after
// changing W).
func setupOn(t testing.TB, cfg Config, B, threads int, o Options) (*GPT, *FlatParams, *Stash, *device.Device) {
	t.Helper()
	k, err := ops.New(ops.Config{Threads: threads})
	if err != nil {
		t.Fatal(err)
	}
	dev := device.New(device.Config{})
	m, err := New(Options{Model: cfg, Kernels: k, Device: dev, MicroBatch: B, Seed: 9, Precision: o.Precision, Flash: o.Flash, Recompute: o.Recompute})
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPartParams(cfg, Part{}, o.Precision, dev)
	if err != nil {
		t.Fatal(err)
	}
	if err := InitRange(cfg, 1, p.W, 0, len(p.W)); err != nil {
		t.Fatal(err)
	}
	p.Sync(k)
	s, err := m.NewStash()
	if err != nil {
		t.Fatal(err)
	}
	return m, p, s, dev
}

// policies are the precisions every pass test runs under.
var policies = []precision.Policy{precision.FP32(), precision.BF16(), precision.FP16(1, 1)}

// perturb adds N(0, std²) noise to every weight.
func perturb(w []float32, std float64, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range w {
		w[i] += float32(r.NormFloat64() * std)
	}
}

// randomBatch draws B·T input and target tokens.
func randomBatch(cfg Config, B int, seed uint64) Batch {
	r := rand.New(rand.NewPCG(seed, 2))
	n := B * cfg.SeqLen
	b := Batch{Inputs: make([]int32, n), Targets: make([]int32, n)}
	for i := range b.Inputs {
		b.Inputs[i] = int32(r.IntN(cfg.Vocab))
		b.Targets[i] = int32(r.IntN(cfg.Vocab))
	}
	return b
}
