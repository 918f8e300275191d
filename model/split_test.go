package model

import (
	"math"
	"testing"

	"trellis/precision"
)

// The split backward (input gradients, then the deferred weight
// gradients) gives BlockBackward's gradients and DResidual bit for bit,
// with and without dropout, even with another micro-batch's input pass in
// between (the weight stash and the stash carry everything W needs); in
// fp32 and under mixed precision (bf16, fp16: the 16-bit GEMMs of
// linearInputGrad and linearWeightGrad are linearBackwardSet's).
func TestSplitBackwardMatchesBlockBackward(t *testing.T) {
	for _, base := range []Config{{Layers: 2, Hidden: 16, Heads: 2, SeqLen: 8, Vocab: 32}, tinyLlama} {
		for _, pol := range policies {
			for _, drop := range []float64{0, 0.1} {
				cfg := base
				cfg.Dropout = drop
				splitMatchesWhole(t, pol, cfg)
			}
		}
	}
}

func splitMatchesWhole(t *testing.T, pol precision.Policy, cfg Config) {
	dt := pol.Compute
	drop := cfg.Dropout
	m, fp, s, _ := setupOn(t, cfg, 2, 1, Options{Precision: pol})
	s2, err := m.NewStash()
	if err != nil {
		t.Fatal(err)
	}
	b1, b2 := randomBatch(cfg, 2, 3), randomBatch(cfg, 2, 4)
	b2.Sample = 2
	run := func(split bool) ([]float32, []float32) {
		fp.ZeroGrads()
		for _, x := range []struct {
			s *Stash
			b Batch
		}{{s, b1}, {s2, b2}} {
			if _, err := m.Forward(fp, x.s, x.b); err != nil {
				t.Fatal(err)
			}
		}
		var dres []float32
		ws := make([]*WeightStash, 2)
		for i, st := range []*Stash{s, s2} {
			if err := m.HeadBackward(fp, st, 0.5); err != nil {
				t.Fatal(err)
			}
			for l := cfg.Layers - 1; l >= 0; l-- {
				if !split {
					err = m.BlockBackward(fp, st, l)
				} else {
					if ws[i] == nil {
						if ws[i], err = m.NewWeightStash(0, cfg.Layers); err != nil {
							t.Fatal(err)
						}
					}
					err = m.BlockBackwardInput(fp, st, ws[i], l)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			dres = append(dres, m.DResidual()...)
			if err := m.EmbedBackward(fp, st); err != nil {
				t.Fatal(err)
			}
		}
		if split {
			for i, st := range []*Stash{s, s2} {
				for l := cfg.Layers - 1; l >= 0; l-- {
					if err := m.BlockBackwardWeight(fp, st, ws[i], l); err != nil {
						t.Fatal(err)
					}
				}
				ws[i].Free()
			}
		}
		return append([]float32(nil), fp.G...), dres
	}
	wantG, wantD := run(false)
	gotG, gotD := run(true)
	for i := range wantG {
		if math.Float32bits(gotG[i]) != math.Float32bits(wantG[i]) {
			t.Fatalf("%s, dropout %v: gradient %d: split %v, whole %v", dt, drop, i, gotG[i], wantG[i])
		}
	}
	for i := range wantD {
		if gotD[i] != wantD[i] {
			t.Fatalf("%s, dropout %v: input gradient %d: split %v, whole %v", dt, drop, i, gotD[i], wantD[i])
		}
	}
	var nz int
	for _, g := range wantG {
		if g != 0 {
			nz++
		}
	}
	if nz < len(wantG)/2 {
		t.Fatalf("only %d of %d gradients are non-zero", nz, len(wantG))
	}
}
