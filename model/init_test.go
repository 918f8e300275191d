package model

import (
	"math"
	"slices"
	"strings"
	"testing"
)

func TestInitRangeIndependence(t *testing.T) {
	cfg := Config{Layers: 2, Hidden: 16, Heads: 2, SeqLen: 8, Vocab: 30}
	n := cfg.NumParams()
	full := make([]float32, n)
	if err := InitRange(cfg, 42, full, 0, n); err != nil {
		t.Fatal(err)
	}
	// Shards of a ZeRO-3 split into 3 and 7, plus cuts inside tensors and units.
	var cuts [][]int
	for _, parts := range []int{3, 7} {
		var c []int
		for i := 0; i <= parts; i++ {
			c = append(c, i*n/parts)
		}
		cuts = append(cuts, c)
	}
	cuts = append(cuts, []int{0, 1, 2, 301, 302, cfg.Layout().Units[1].Offset + 5, n - 1, n})
	for _, c := range cuts {
		got := make([]float32, n)
		for i := 0; i+1 < len(c); i++ {
			if err := InitRange(cfg, 42, got[c[i]:c[i+1]], c[i], c[i+1]); err != nil {
				t.Fatal(err)
			}
		}
		if !slices.Equal(got, full) {
			t.Errorf("cuts %v: sharded init differs from the whole", c)
		}
	}
	other := make([]float32, n)
	if err := InitRange(cfg, 43, other, 0, n); err != nil {
		t.Fatal(err)
	}
	if slices.Equal(other, full) {
		t.Error("seeds 42 and 43 give the same weights")
	}
	if err := InitRange(cfg, 1, make([]float32, 3), 5, 9); err == nil {
		t.Error("InitRange accepted len(dst) != hi−lo")
	}
	if err := InitRange(cfg, 1, make([]float32, 2), n-1, n+1); err == nil {
		t.Error("InitRange accepted hi beyond the parameter count")
	}
}

func TestInitStatistics(t *testing.T) {
	cfg := Config{Layers: 4, Hidden: 64, Heads: 4, SeqLen: 32, Vocab: 100}
	n := cfg.NumParams()
	w := make([]float32, n)
	if err := InitRange(cfg, 7, w, 0, n); err != nil {
		t.Fatal(err)
	}
	resid := 0.02 / math.Sqrt(8)
	for _, u := range cfg.Layout().Units {
		for _, tn := range u.Tensors {
			v := w[tn.Offset : tn.Offset+tn.Size]
			var s, s2 float64
			for _, x := range v {
				s += float64(x)
				s2 += float64(x) * float64(x)
			}
			mean, std := s/float64(len(v)), math.Sqrt(s2/float64(len(v)))
			switch {
			case strings.HasSuffix(tn.Name, "ln_1.weight"), strings.HasSuffix(tn.Name, "ln_2.weight"), tn.Name == "ln_f.weight":
				if mean != 1 || std != 1 {
					t.Errorf("%s: LayerNorm weight not all ones", tn.Name)
				}
			case strings.HasSuffix(tn.Name, ".bias"):
				if s2 != 0 {
					t.Errorf("%s: bias not zero", tn.Name)
				}
			default:
				want := 0.02
				if strings.HasSuffix(tn.Name, "c_proj.weight") {
					want = resid
				}
				if math.Abs(std-want) > 0.1*want || math.Abs(mean) > 0.1*want {
					t.Errorf("%s: mean %.4g std %.4g, want 0 and %.4g", tn.Name, mean, std, want)
				}
			}
		}
	}
}
