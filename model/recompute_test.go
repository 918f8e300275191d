package model

import (
	"fmt"
	"slices"
	"testing"

	"trellis/arch"
	"trellis/device"
	"trellis/ops"
	"trellis/precision"
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
	p, err := NewPartParams(cfg, Part{}, o.Precision, dev)
	if err != nil {
		t.Fatal(err)
	}
	if err := InitRange(cfg, 1, p.W, 0, len(p.W)); err != nil {
		t.Fatal(err)
	}
	perturb(p.W, 0.05, 3)
	p.Sync(k)
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
// whole and split backward, in fp32, bf16 and fp16, give the losses and
// gradients of no recomputation bit for bit, and the act peak is the stash
// StashBytes states, which is arch's declarations: selective saves (L−1)
// blocks' probabilities (nothing with flash), full (L−1) blocks'
// activations.
//
// The Llama (grouped-query attention, RoPE, SwiGLU, the untied head) is
// held alike: selective recomputation reruns its core (q·kᵀ, softmax, ·v)
// from the saved, rotated q and k, Korthikanti et al.'s choice for this
// block too.
func TestRecomputeBitIdentical(t *testing.T) {
	llama := tinyLlama
	llama.Layers, llama.Dropout = 3, 0.2
	moe := tinyMoE // every block an MoE one, capacity on, a shared expert
	moe.Layers, moe.Dropout, moe.CapacityFactor, moe.SharedExperts = 3, 0.2, 1, 1
	for _, cfg := range []Config{{Layers: 3, Hidden: 16, Heads: 2, SeqLen: 7, Vocab: 13, Dropout: 0.2}, llama, moe} {
		recomputeBitIdentical(t, cfg)
	}
}

func recomputeBitIdentical(t *testing.T, cfg Config) {
	L := cfg.Layers
	for _, pol := range policies {
		for _, flash := range []bool{false, true} {
			d := Dims(cfg, 2, Part{}, flash, RecomputeNone)
			block := cfg.BlocksElemsAt(d, 0, 1, pol.Half()).Bytes()
			A := 4 * 2 * float64(cfg.Heads) * float64(cfg.SeqLen*cfg.SeqLen)
			if flash {
				A = 0
			}
			for _, split := range []bool{false, true} {
				refL, refG, refAct, _ := rcRun(t, cfg, Options{Flash: flash, Precision: pol}, split)
				for _, tc := range []struct {
					rc    Recompute
					saved float64 // bytes
				}{{RecomputeSelective, float64(L-1) * A}, {RecomputeFull, float64(L-1) * block}} {
					t.Run(fmt.Sprintf("%s/experts=%d/%v/%v/flash=%v/split=%v", cfg.ArchName(), cfg.Experts, pol, tc.rc, flash, split), func(t *testing.T) {
						l, g, act, m := rcRun(t, cfg, Options{Flash: flash, Recompute: tc.rc, Precision: pol}, split)
						if !slices.Equal(l, refL) {
							t.Errorf("losses %v, without recomputation %v", l, refL)
						}
						if !slices.Equal(g, refG) {
							t.Errorf("gradients differ from those without recomputation")
						}
						if act != m.StashBytes() {
							t.Errorf("act peak %d B, StashBytes %d", act, m.StashBytes())
						}
						if float64(refAct-act) != tc.saved {
							t.Errorf("saved %d B, want %g", refAct-act, tc.saved)
						}
					})
				}
			}
		}
	}
}

// Dims is the declarations' view of a pass of micro-batch B (tests).
func Dims(c Config, B int, p Part, flash bool, rc Recompute) arch.Dims {
	return arch.Dims{B: B, T: c.SeqLen, Part: p, Flash: flash, Recompute: rc}
}

// A pipeline stage's stash under recomputation is its declarations'
// counterpart: one shared layer for full.
func TestRecomputeStageStash(t *testing.T) {
	cfg := Config{Layers: 4, Hidden: 8, Heads: 2, SeqLen: 5, Vocab: 11}
	for _, rc := range []Recompute{RecomputeNone, RecomputeSelective, RecomputeFull} {
		_, _, _, m := rcRun(t, cfg, Options{Recompute: rc, Precision: precision.FP32()}, false)
		s, err := m.NewStageStash(1, 3, false)
		if err != nil {
			t.Fatal(err)
		}
		want := cfg.StageStash(Dims(cfg, 2, Part{}, false, rc), 2, false, false)
		if float64(len(s.buf.Data)) != want.F32 {
			t.Errorf("%v: stage stash holds %d floats, declared %g", rc, len(s.buf.Data), want.F32)
		}
	}
	// An MoE model with a dense first block: a stage's blocks of both
	// kinds, each declared its own (full: one of each kind).
	moe := tinyMoE
	moe.Layers, moe.DenseFirst, moe.MoEEvery = 4, 1, 2 // blocks 1 and 3 MoE
	for _, rc := range []Recompute{RecomputeNone, RecomputeSelective, RecomputeFull} {
		_, _, _, m := rcRun(t, moe, Options{Recompute: rc, Precision: precision.FP32()}, false)
		d := Dims(moe, 2, Part{}, false, rc)
		for _, st := range [][2]int{{0, 2}, {1, 4}, {2, 3}} {
			s, err := m.NewStageStash(st[0], st[1], false)
			if err != nil {
				t.Fatal(err)
			}
			want := moe.StageStashAt(d, st[0], st[1], false, false)
			dense, sparse := arch.Sum(moe.BlockSavedAt(d, 0), false).F32, arch.Sum(moe.BlockSavedAt(d, 1), false).F32
			if sparse <= dense {
				t.Fatalf("an MoE block declares %g floats, a dense one %g", sparse, dense)
			}
			if float64(len(s.buf.Data)) != want.F32 {
				t.Errorf("MoE %v blocks %v: stage stash holds %d floats, declared %g", rc, st, len(s.buf.Data), want.F32)
			}
			s.Free()
		}
	}
	if _, err := New(Options{Model: cfg, Kernels: &ops.Kernels{}, Device: device.New(device.Config{}), MicroBatch: 1, Recompute: 7}); err == nil {
		t.Errorf("recompute=7 accepted")
	}
}
