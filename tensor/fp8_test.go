package tensor

import (
	"math"
	"testing"
)

// spec8 is the OCP FP8 value table derived from the specification's
// definition, independently of the encoder: for every code, its value
// (NaN as NaN, E5M2's infinities as ±Inf).
func spec8(c uint8, expBits, man, bias int, e4m3 bool) float64 {
	s := 1.0
	if c&0x80 != 0 {
		s = -1
	}
	e := int(c>>man) & (1<<expBits - 1)
	m := int(c) & (1<<man - 1)
	top := 1<<expBits - 1
	switch {
	case e4m3 && e == top && m == 1<<man-1:
		return math.NaN()
	case !e4m3 && e == top && m == 0:
		return s * math.Inf(1)
	case !e4m3 && e == top:
		return math.NaN()
	case e == 0:
		return s * float64(m) / float64(int(1)<<man) * math.Pow(2, float64(1-bias))
	}
	return s * (1 + float64(m)/float64(int(1)<<man)) * math.Pow(2, float64(e-bias))
}

type format8 struct {
	name   string
	max    float64
	enc    func(float32) uint8
	dec    func(uint8) float32
	spec   func(uint8) float64
	minSub float64
}

func formats8() []format8 {
	return []format8{
		{"e4m3", E4M3Max, func(f float32) uint8 { return uint8(ToE4M3(f)) }, func(c uint8) float32 { return E4M3(c).Float32() },
			func(c uint8) float64 { return spec8(c, 4, 3, 7, true) }, math.Ldexp(1, -9)},
		{"e5m2", E5M2Max, func(f float32) uint8 { return uint8(ToE5M2(f)) }, func(c uint8) float32 { return E5M2(c).Float32() },
			func(c uint8) float64 { return spec8(c, 5, 2, 15, false) }, math.Ldexp(1, -16)},
	}
}

// All 256 codes of each format decode to the specification's values, the
// table has the specification's landmarks, and every finite code encodes
// back to itself.
func TestFP8CodesExhaustive(t *testing.T) {
	for _, f := range formats8() {
		finite, maxSeen, nans := 0, 0.0, 0
		for c := 0; c < 256; c++ {
			want, got := f.spec(uint8(c)), float64(f.dec(uint8(c)))
			if math.IsNaN(want) {
				nans++
				if !math.IsNaN(got) {
					t.Errorf("%s %#02x: %g, want NaN", f.name, c, got)
				}
				if !math.IsNaN(float64(f.dec(f.enc(f.dec(uint8(c)))))) {
					t.Errorf("%s %#02x: NaN does not encode to NaN", f.name, c)
				}
				continue
			}
			if got != want || math.Signbit(got) != math.Signbit(want) {
				t.Errorf("%s %#02x: %g, want %g", f.name, c, got, want)
			}
			if math.IsInf(want, 0) {
				if e := f.enc(float32(want)); float64(f.dec(e)) != math.Copysign(f.max, want) {
					t.Errorf("%s: %g encodes to %g, want saturation at %g", f.name, want, f.dec(e), f.max)
				}
				continue
			}
			finite++
			maxSeen = math.Max(maxSeen, math.Abs(want))
			if e := f.enc(float32(want)); e != uint8(c) {
				t.Errorf("%s %#02x (%g) encodes to %#02x", f.name, c, want, e)
			}
		}
		if maxSeen != f.max || f.spec(1) != f.minSub {
			t.Errorf("%s: max %g, min subnormal %g; want %g, %g", f.name, maxSeen, f.spec(1), f.max, f.minSub)
		}
		wantFinite, wantNaN := 254, 2 // e4m3: two NaNs, no Inf
		if f.name == "e5m2" {
			wantFinite, wantNaN = 248, 6
		}
		if finite != wantFinite || nans != wantNaN {
			t.Errorf("%s: %d finite codes and %d NaNs, want %d and %d", f.name, finite, nans, wantFinite, wantNaN)
		}
	}
	for _, c := range []struct {
		got, want float32
	}{{E4M3(0x38).Float32(), 1}, {E4M3(0x7e).Float32(), 448}, {E4M3(0x08).Float32(), 1.0 / 64}, {E4M3(0xb8).Float32(), -1},
		{E5M2(0x3c).Float32(), 1}, {E5M2(0x7b).Float32(), 57344}, {E5M2(0x04).Float32(), 1.0 / 16384}} {
		if c.got != c.want {
			t.Errorf("landmark %g, want %g", c.got, c.want)
		}
	}
}

// nearest8 is a brute-force search: the finite code nearest x, ties to
// the code with an even mantissa, beyond the largest finite magnitude
// saturated.
func nearest8(f format8, x float32) uint8 {
	if math.Abs(float64(x)) >= f.max {
		if x < 0 {
			return f.enc(-float32(f.max))
		}
		return f.enc(float32(f.max))
	}
	best, bestD := -1, math.Inf(1)
	for c := 0; c < 256; c++ {
		v := f.spec(uint8(c))
		if math.IsNaN(v) || math.IsInf(v, 0) || math.Signbit(v) != math.Signbit(float64(x)) {
			continue
		}
		d := math.Abs(v - float64(x))
		if d < bestD || (d == bestD && c&1 == 0) {
			best, bestD = c, d
		}
	}
	return uint8(best)
}

// The encoder is the brute-force nearest value on every midpoint between
// neighbouring codes (the ties), one fp32 ulp either side of each, the
// codes themselves, values beyond the range and 20000 pseudo-random fp32s
// across the formats' ranges.
func TestFP8RoundingMatchesBruteForce(t *testing.T) {
	for _, f := range formats8() {
		var xs []float32
		var pos []float64
		for c := 0; c < 128; c++ {
			if v := f.spec(uint8(c)); !math.IsNaN(v) && !math.IsInf(v, 0) {
				pos = append(pos, v)
			}
		}
		for i := 0; i+1 < len(pos); i++ {
			mid := float32((pos[i] + pos[i+1]) / 2) // exact in fp32
			xs = append(xs, mid, math.Nextafter32(mid, 0), math.Nextafter32(mid, 1e9), float32(pos[i]))
		}
		xs = append(xs, float32(f.max)*1.03, float32(f.max)*1.1, 1e30, float32(f.minSub)/2, float32(f.minSub)/2*1.0001, 1e-30, 1e-40)
		r := uint32(2463534242)
		for i := 0; i < 20000; i++ {
			r ^= r << 13
			r ^= r >> 17
			r ^= r << 5
			e := int(r%40) - 22 // 2^-22 .. 2^17
			xs = append(xs, float32(math.Ldexp(1+float64(r>>8)/(1<<24), e)))
		}
		for _, x := range xs {
			for _, s := range []float32{x, -x} {
				if got, want := f.enc(s), nearest8(f, s); got != want {
					t.Fatalf("%s: %g (%#08x) encodes to %#02x (%g), nearest is %#02x (%g)", f.name, s, math.Float32bits(s), got, f.dec(got), want, f.dec(want))
				}
			}
		}
	}
	if ToE4M3(float32(math.Inf(-1))) != 0xfe || ToE5M2(float32(math.Inf(1))) != 0x7b {
		t.Error("infinities do not saturate")
	}
}
