package rng

import (
	"math"
	"testing"
)

// Known-answer vectors from Random123's kat_vectors ("philox4x32 10" lines):
// counter (4 words), key (2 words), expected output (4 words).
func TestPhilox4x32KnownAnswers(t *testing.T) {
	cases := []struct {
		ctr  [4]uint32
		key  [2]uint32
		want [4]uint32
	}{
		{[4]uint32{0, 0, 0, 0}, [2]uint32{0, 0}, [4]uint32{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
		{[4]uint32{^uint32(0), ^uint32(0), ^uint32(0), ^uint32(0)}, [2]uint32{^uint32(0), ^uint32(0)}, [4]uint32{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
		{[4]uint32{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, [2]uint32{0xa4093822, 0x299f31d0}, [4]uint32{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
	}
	for _, c := range cases {
		if got := Philox4x32(c.ctr, c.key); got != c.want {
			t.Errorf("Philox4x32(%08x, %08x) = %08x, want %08x", c.ctr, c.key, got, c.want)
		}
	}
}

func TestDeterminismAndKeying(t *testing.T) {
	a := Key(1234, "h.0.attn.c_attn.weight")
	if a != Key(1234, "h.0.attn.c_attn.weight") {
		t.Fatal("Key is not deterministic")
	}
	distinct := []Stream{a, Key(1235, "h.0.attn.c_attn.weight"), Key(1234, "h.1.attn.c_attn.weight"), a.Sub(0), a.Sub(1), a.Sub(0).Sub(0)}
	seen := map[Stream]int{}
	for i, s := range distinct {
		if j, ok := seen[s]; ok {
			t.Errorf("streams %d and %d share a key", j, i)
		}
		seen[s] = i
		if s.Uint32(7) == distinct[(i+1)%len(distinct)].Uint32(7) {
			t.Errorf("stream %d and %d give the same word at index 7", i, (i+1)%len(distinct))
		}
	}
	if a.Sub(5) != a.Sub(5) || a.Normal(99) != a.Normal(99) || a.Uniform(3) != a.Uniform(3) {
		t.Fatal("values are not deterministic")
	}
}

// Filling [0,n) must equal filling [0,k) then [k,n) for every split point,
// including splits inside a Philox block, and must equal the pointwise values.
func TestRangeIndependence(t *testing.T) {
	s := Key(7, "wte")
	const n = 37
	for _, lo := range []uint64{0, 1, 6, 1 << 33} {
		full := make([]float32, n)
		fullU := make([]float32, n)
		s.FillNormal(full, lo, 0.5, 2)
		s.FillUniform(fullU, lo)
		for j := range full {
			if want := float32(0.5 + 2*s.Normal(lo+uint64(j))); full[j] != want {
				t.Fatalf("lo=%d: FillNormal[%d]=%v, Normal=%v", lo, j, full[j], want)
			}
			if want := s.Uniform(lo + uint64(j)); fullU[j] != want {
				t.Fatalf("lo=%d: FillUniform[%d]=%v, Uniform=%v", lo, j, fullU[j], want)
			}
		}
		for k := 0; k <= n; k++ {
			part := make([]float32, n)
			partU := make([]float32, n)
			s.FillNormal(part[:k], lo, 0.5, 2)
			s.FillNormal(part[k:], lo+uint64(k), 0.5, 2)
			s.FillUniform(partU[:k], lo)
			s.FillUniform(partU[k:], lo+uint64(k))
			for j := range part {
				if part[j] != full[j] || partU[j] != fullU[j] {
					t.Fatalf("lo=%d split %d: element %d differs", lo, k, j)
				}
			}
		}
	}
}

func TestMoments(t *testing.T) {
	const n = 1 << 18
	cases := []struct {
		name           string
		fill           func(dst []float32)
		mean, variance float64
	}{
		{"normal", func(d []float32) { Key(1, "n").FillNormal(d, 0, 0, 1) }, 0, 1},
		{"normal(3,0.5)", func(d []float32) { Key(2, "n").FillNormal(d, 100, 3, 0.5) }, 3, 0.25},
		{"uniform", func(d []float32) { Key(3, "u").FillUniform(d, 0) }, 0.5, 1.0 / 12},
	}
	for _, c := range cases {
		d := make([]float32, n)
		c.fill(d)
		var s, s2 float64
		for _, v := range d {
			s += float64(v)
		}
		m := s / n
		for _, v := range d {
			s2 += (float64(v) - m) * (float64(v) - m)
		}
		v := s2 / (n - 1)
		sd := math.Sqrt(c.variance)
		// 6 standard errors of the mean; variance within 2%.
		if math.Abs(m-c.mean) > 6*sd/math.Sqrt(n) {
			t.Errorf("%s: mean %.5f, want %.5f", c.name, m, c.mean)
		}
		if math.Abs(v-c.variance) > 0.02*c.variance {
			t.Errorf("%s: variance %.5f, want %.5f", c.name, v, c.variance)
		}
	}
}

func TestUniformRangeAndNormalTails(t *testing.T) {
	s := Key(9, "x")
	d := make([]float32, 1<<16)
	s.FillUniform(d, 0)
	lo, hi := float32(1), float32(0)
	for _, v := range d {
		if v < 0 || v >= 1 {
			t.Fatalf("uniform %v outside [0,1)", v)
		}
		lo, hi = min(lo, v), max(hi, v)
	}
	if lo > 1e-3 || hi < 1-1e-3 {
		t.Errorf("uniform range [%v,%v] does not cover [0,1)", lo, hi)
	}
	s.FillNormal(d, 0, 0, 1)
	var beyond2 int
	for _, v := range d {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatalf("normal value %v", v)
		}
		if math.Abs(float64(v)) > 2 {
			beyond2++
		}
	}
	// P(|Z|>2) = 0.0455; allow ±15%.
	if f := float64(beyond2) / float64(len(d)); f < 0.0455*0.85 || f > 0.0455*1.15 {
		t.Errorf("fraction beyond 2 sigma %.4f, want about 0.0455", f)
	}
}

func BenchmarkFillNormal(b *testing.B) {
	d := make([]float32, 1<<16)
	s := Key(1, "bench")
	b.SetBytes(int64(len(d)) * 4)
	for i := 0; i < b.N; i++ {
		s.FillNormal(d, uint64(i), 0, 0.02)
	}
}

func BenchmarkPhilox(b *testing.B) {
	s := Key(1, "bench")
	var acc uint32
	for i := 0; i < b.N; i++ {
		w := s.Block(uint64(i))
		acc ^= w[0] ^ w[3]
	}
	if acc == 42 {
		b.Log(acc)
	}
}
