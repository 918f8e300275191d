package model

import (
	"math"
	"testing"
)

// TestInitWithWeightsMatchesSeed: starting a part from given global weights
// gives exactly the local vector that seeding it gives, for every
// tensor-parallel rank (strided boxes, padded vocabulary) and any range —
// so [model] init means the same model under every plan.
func TestInitWithWeightsMatchesSeed(t *testing.T) {
	cfg := Config{Layers: 2, Hidden: 24, Heads: 6, SeqLen: 8, Vocab: 61}
	global := make([]float32, cfg.Layout().Size)
	if err := InitRange(cfg, 5, global, 0, len(global)); err != nil {
		t.Fatal(err)
	}
	for _, p := range []Part{{}, {TP: 2, Rank: 1}, {TP: 3, Rank: 2}, {TP: 2, Rank: 0, SP: true}} {
		n := cfg.PartLayout(p).Size
		want, got := make([]float32, n), make([]float32, n)
		if err := InitPart(cfg, p, 5, want, 0, n); err != nil {
			t.Fatal(err)
		}
		lo, hi := n/3, n-7 // a range that cuts tensors
		if err := InitPartWith(cfg, p, Init{Weights: global}, got[lo:hi], lo, hi); err != nil {
			t.Fatal(err)
		}
		for i := lo; i < hi; i++ {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("part %+v: element %d from weights %v, from the seed %v", p, i, got[i], want[i])
			}
		}
	}
	if err := InitPartWith(cfg, Part{}, Init{Weights: global[1:]}, make([]float32, 4), 0, 4); err == nil {
		t.Fatal("weights of the wrong size: want an error")
	}
}
