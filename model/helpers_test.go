package model

import (
	"math/rand/v2"
	"testing"

	"trellis/device"
	"trellis/ops"
)

// tiny is the configuration of the whole-model tests.
var tiny = Config{Layers: 2, Hidden: 8, Heads: 2, SeqLen: 5, Vocab: 11}

// setup builds a model, flat parameters (initialised with seed 1, plus
// noise so that no gradient vanishes by symmetry) and one stash.
func setup(t testing.TB, cfg Config, B, threads int) (*GPT, *FlatParams, *Stash, *device.Device) {
	t.Helper()
	return setupOn(t, cfg, B, threads, device.Config{}, Options{})
}

// setupOn is setup on a device of config dc, with o's Compute and Flash (the rest of
// o is set here).
func setupOn(t testing.TB, cfg Config, B, threads int, dc device.Config, o Options) (*GPT, *FlatParams, *Stash, *device.Device) {
	t.Helper()
	k, err := ops.New(ops.Config{Threads: threads})
	if err != nil {
		t.Fatal(err)
	}
	dev := device.New(dc)
	m, err := New(Options{Model: cfg, Kernels: k, Device: dev, MicroBatch: B, Seed: 9, Compute: o.Compute, Flash: o.Flash})
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewFlatParams(cfg, dev)
	if err != nil {
		t.Fatal(err)
	}
	if err := InitRange(cfg, 1, p.W, 0, len(p.W)); err != nil {
		t.Fatal(err)
	}
	s, err := m.NewStash()
	if err != nil {
		t.Fatal(err)
	}
	return m, p, s, dev
}

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
