package model

import (
	"fmt"
	"slices"
	"testing"

	"trellis/device"
	"trellis/ops"
)

// rcRun trains nothing: it runs forward and backward of three
// micro-batches (gradients accumulating) with the given options and
// returns the losses, the gradients and the device's act peak. split runs
// the blocks' backward as BlockBackwardInput then, after every block's,
// BlockBackwardWeight (the zero-bubble order that overwrites full
// recomputation's shared activations in between).
func rcRun(t *testing.T, cfg Config, o Options, split bool) ([]float32, []float32, int64, *GPT) {
	t.Helper()
	k, err := ops.New(ops.Config{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	dev := device.New(device.Config{})
	o.Model, o.Kernels, o.Device, o.MicroBatch, o.Seed = cfg, k, dev, 2, 9
	m, err := New(o)
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
	perturb(p.W, 0.05, 3)
	s, err := m.NewStash()
	if err != nil {
		t.Fatal(err)
	}
	ws, err := m.NewWeightStash(0, cfg.Layers)
	if err != nil {
		t.Fatal(err)
	}
	var losses []float32
	for i := range 3 {
		b := randomBatch(cfg, 2, uint64(i+1))
		b.Step, b.Sample = 4, 2*i
		loss, err := m.Forward(p, s, b)
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, loss)
		if !split {
			if err := m.Backward(p, s, 1.0/3); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := m.HeadBackward(p, s, 1.0/3); err != nil {
			t.Fatal(err)
		}
		for l := cfg.Layers - 1; l >= 0; l-- {
			if err := m.BlockBackwardInput(p, s, ws, l); err != nil {
				t.Fatal(err)
			}
		}
		for l := cfg.Layers - 1; l >= 0; l-- {
			if err := m.BlockBackwardWeight(p, s, ws, l); err != nil {
				t.Fatal(err)
			}
		}
		if err := m.EmbedBackward(p, s); err != nil {
			t.Fatal(err)
		}
	}
	ws.Free()
	return losses, slices.Clone(p.G), dev.Stats().Peak[device.Act] - 4*int64(m.WeightStashFloats(0, cfg.Layers)), m
}

// Selective and full recomputation, with and without flash, with dropout,
// whole and split backward, give the losses and gradients of no
// recomputation bit for bit, and the act peak is the stash StashBytes
// states: selective saves (L−1)·B·NH·T² floats (nothing with flash), full
// (L−1) layers' activations.
func TestRecomputeBitIdentical(t *testing.T) {
	cfg := Config{Layers: 3, Hidden: 16, Heads: 2, SeqLen: 7, Vocab: 13, Dropout: 0.2}
	B, T, C, L := 2, cfg.SeqLen, cfg.Hidden, cfg.Layers
	BT := B * T
	for _, flash := range []bool{false, true} {
		A := B * cfg.Heads * T * T
		if flash {
			A = B * cfg.Heads * T
		}
		layer := 15*BT*C + 4*BT + A
		for _, split := range []bool{false, true} {
			refL, refG, refAct, _ := rcRun(t, cfg, Options{Flash: flash}, split)
			for _, tc := range []struct {
				rc    Recompute
				saved int // floats
			}{{RecomputeSelective, (L - 1) * A}, {RecomputeFull, (L - 1) * layer}} {
				if flash && tc.rc == RecomputeSelective {
					tc.saved = 0
				}
				t.Run(fmt.Sprintf("%v/flash=%v/split=%v", tc.rc, flash, split), func(t *testing.T) {
					l, g, act, m := rcRun(t, cfg, Options{Flash: flash, Recompute: tc.rc}, split)
					if !slices.Equal(l, refL) {
						t.Errorf("losses %v, without recomputation %v", l, refL)
					}
					if !slices.Equal(g, refG) {
						t.Errorf("gradients differ from those without recomputation")
					}
					if act != m.StashBytes() {
						t.Errorf("act peak %d B, StashBytes %d", act, m.StashBytes())
					}
					if refAct-act != 4*int64(tc.saved) {
						t.Errorf("saved %d B, want %d", refAct-act, 4*tc.saved)
					}
				})
			}
		}
	}
}

// A pipeline stage's stash under recomputation is sized as a whole-model
// stash's counterpart: one shared layer for full.
func TestRecomputeStageStash(t *testing.T) {
	cfg := Config{Layers: 4, Hidden: 8, Heads: 2, SeqLen: 5, Vocab: 11}
	for _, rc := range []Recompute{RecomputeNone, RecomputeSelective, RecomputeFull} {
		_, _, _, m := rcRun(t, cfg, Options{Recompute: rc}, false)
		if got, want := m.StageStashFloats(0, cfg.Layers, true), m.stashFloats(); got != want {
			t.Errorf("%v: whole-model stage stash %d floats, stash %d", rc, got, want)
		}
		s, err := m.NewStageStash(1, 3, false)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.buf.Data) != m.StageStashFloats(1, 3, false) {
			t.Errorf("%v: stage stash holds %d floats, StageStashFloats %d", rc, len(s.buf.Data), m.StageStashFloats(1, 3, false))
		}
	}
	if _, err := New(Options{Model: cfg, Kernels: &ops.Kernels{}, Device: device.New(device.Config{}), MicroBatch: 1, Recompute: 7}); err == nil {
		t.Errorf("recompute=7 accepted")
	}
}

// StashFloatCountFor, the float64 formula, equals the stash a one-device
// runner allocates for every flash × recompute combination.
func TestStashFloatCountFor(t *testing.T) {
	cfg := Config{Layers: 3, Hidden: 16, Heads: 2, SeqLen: 7, Vocab: 13}
	for _, flash := range []bool{false, true} {
		for _, rc := range []Recompute{RecomputeNone, RecomputeSelective, RecomputeFull} {
			_, _, _, m := rcRun(t, cfg, Options{Flash: flash, Recompute: rc}, false)
			if got, want := cfg.StashFloatCountFor(2, flash, rc), float64(m.stashFloats()); got != want {
				t.Errorf("flash=%v %v: StashFloatCountFor %g, stash %g floats", flash, rc, got, want)
			}
		}
	}
	if cfg.StashFloatCountFor(2, false, RecomputeNone) != cfg.StashFloatCount(2) {
		t.Errorf("StashFloatCountFor without flash or recomputation differs from StashFloatCount")
	}
}
