package tensor

import (
	"math"
	"math/big"
	"testing"
)

// refRound rounds f to a format with the given mantissa bits and exponent range
// using math/big (round half to even), as an independent reference.
func refRound(f float32, mant uint, minExp, maxExp int) float64 {
	if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) || f == 0 {
		return float64(f)
	}
	x := new(big.Float).SetFloat64(float64(f))
	// Subnormals: precision shrinks below minExp.
	exp := x.MantExp(nil) - 1 // f = m * 2^exp with m in [1,2)
	prec := mant + 1
	if exp < minExp {
		d := minExp - exp
		if int(prec) <= d {
			// Below the subnormal range: compare against half the smallest subnormal.
			tiny := math.Ldexp(1, minExp-int(mant))
			a := math.Abs(float64(f))
			if a > tiny/2 {
				return math.Copysign(tiny, float64(f))
			}
			return math.Copysign(0, float64(f))
		}
		prec -= uint(d)
	}
	x.SetMode(big.ToNearestEven).SetPrec(prec)
	r, _ := x.Float64()
	if math.Abs(r) >= math.Ldexp(1, maxExp+1) {
		return math.Copysign(math.Inf(1), r)
	}
	return r
}

func samples() []float32 {
	out := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 0.1, 1.0 / 3, 65504, 65520, 65519.99,
		3.3895314e38, 3.4e38, math.MaxFloat32, 1e-8, 5.96e-8, 2.98e-8, 2.9802322e-08, 6.1e-5, 1e-45, 1e-39,
		float32(math.Inf(1)), float32(math.Inf(-1)), 1.00390625, 1.01171875, 1.0009765625, 1.0029296875}
	// Exact ties for bf16 (bit 15 set, rest zero) with both parities.
	for _, u := range []uint32{0x3f808000, 0x3f818000, 0x3f807fff, 0x3f808001, 0x7f7f8000, 0x00008000, 0x00018000} {
		out = append(out, math.Float32frombits(u))
	}
	r := uint32(12345)
	for i := 0; i < 20000; i++ {
		r ^= r << 13
		r ^= r >> 17
		r ^= r << 5
		f := math.Float32frombits(r)
		if !math.IsNaN(float64(f)) {
			out = append(out, f)
		}
	}
	return out
}

func TestBF16RoundNearestEven(t *testing.T) {
	for _, f := range samples() {
		got := float64(ToBF16(f).Float32())
		want := refRound(f, 7, -126, 127)
		if got != want && !(math.IsInf(got, 0) && math.IsInf(want, 0) && got == want) {
			t.Fatalf("bf16(%g [%08x]) = %g, want %g", f, math.Float32bits(f), got, want)
		}
	}
}

func TestF16RoundNearestEven(t *testing.T) {
	for _, f := range samples() {
		got := float64(ToF16(f).Float32())
		want := refRound(f, 10, -14, 15)
		if got != want {
			t.Fatalf("f16(%g [%08x]) = %g, want %g", f, math.Float32bits(f), got, want)
		}
	}
}

func TestSpecials(t *testing.T) {
	nan := float32(math.NaN())
	negNaN := math.Float32frombits(0xffc00001)
	for _, f := range []float32{nan, negNaN, math.Float32frombits(0x7f800001)} { // incl. a signalling NaN
		if b := ToBF16(f).Float32(); !math.IsNaN(float64(b)) || math.Signbit(float64(b)) != math.Signbit(float64(f)) {
			t.Errorf("bf16 NaN %08x -> %v", math.Float32bits(f), b)
		}
		if h := ToF16(f).Float32(); !math.IsNaN(float64(h)) || math.Signbit(float64(h)) != math.Signbit(float64(f)) {
			t.Errorf("f16 NaN %08x -> %v", math.Float32bits(f), h)
		}
	}
	if ToBF16(math.MaxFloat32).Float32() != float32(math.Inf(1)) {
		t.Errorf("bf16 MaxFloat32 should round to +Inf")
	}
	if ToF16(1e5).Float32() != float32(math.Inf(1)) || ToF16(-1e5).Float32() != float32(math.Inf(-1)) {
		t.Errorf("f16 overflow should round to ±Inf")
	}
}

func TestRoundTripExact(t *testing.T) {
	for u := 0; u < 1<<16; u++ {
		b := BF16Bits(u)
		if f := b.Float32(); !math.IsNaN(float64(f)) && ToBF16(f) != b {
			t.Fatalf("bf16 %04x does not round-trip", u)
		}
		h := F16Bits(u)
		if f := h.Float32(); !math.IsNaN(float64(f)) && ToF16(f) != h {
			t.Fatalf("f16 %04x does not round-trip (%g -> %04x)", u, f, ToF16(f))
		}
	}
}

func TestSlices(t *testing.T) {
	src := []float32{1, 2.5, -3.75}
	b := make([]BF16Bits, 3)
	EncodeBF16(b, src)
	back := make([]float32, 3)
	DecodeBF16(back, b)
	h := make([]F16Bits, 3)
	EncodeF16(h, src)
	back2 := make([]float32, 3)
	DecodeF16(back2, h)
	for i := range src {
		if back[i] != src[i] || back2[i] != src[i] {
			t.Fatalf("slice round trip %v %v %v", src, back, back2)
		}
	}
	if d, err := ParseDType("bf16"); err != nil || d != BF16 || d.Size() != 2 || F32.Size() != 4 {
		t.Fatal("ParseDType")
	}
	if _, err := ParseDType("int8"); err == nil {
		t.Fatal("ParseDType accepted int8")
	}
	if (Shape{2, 3, 4}).Numel() != 24 || (Shape{2, 3}).String() != "(2, 3)" {
		t.Fatal("Shape")
	}
}
