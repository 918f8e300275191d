package tensor

import "math"

// The OCP 8-bit floating-point formats (OCP FP8 specification v1.0, 2023),
// as Hopper's tensor cores and Transformer Engine use them:
//
//	E4M3  1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities,
//	      S.1111.111 is NaN; max 448 (S.1111.110), min normal 2^-6,
//	      min subnormal 2^-9
//	E5M2  1 sign, 5 exponent (bias 15), 2 mantissa bits, IEEE 754-like:
//	      S.11111.00 is ±Inf, S.11111.{01,10,11} NaN; max 57344, min
//	      normal 2^-14, min subnormal 2^-16
//
// Conversions from fp32 round to nearest, ties to even, and saturate: a
// finite value or an infinity beyond the largest finite magnitude becomes
// ±max (the OCP "saturated" mode, PTX's cvt.rn.satfinite); NaN stays NaN
// with its sign. Every E4M3 and E5M2 value is exactly a bf16 and an fp32.
type (
	// E4M3 is an OCP FP8 E4M3 value's bits.
	E4M3 uint8
	// E5M2 is an OCP FP8 E5M2 value's bits.
	E5M2 uint8
)

// The formats' largest finite magnitudes.
const (
	E4M3Max = 448
	E5M2Max = 57344
)

// fp8 describes one of the two formats for the shared encoder.
type fp8 struct {
	man  uint  // mantissa bits
	bias int   // exponent bias
	max  uint8 // the largest finite magnitude's code
	nan  uint8 // the canonical NaN's magnitude code
}

func e4m3() fp8 { return fp8{man: 3, bias: 7, max: 0x7e, nan: 0x7f} }
func e5m2() fp8 { return fp8{man: 2, bias: 15, max: 0x7b, nan: 0x7e} }

// ToE4M3 rounds f to the nearest E4M3, ties to even, saturating at ±448.
func ToE4M3(f float32) E4M3 { return E4M3(e4m3().encode(f)) }

// ToE5M2 rounds f to the nearest E5M2, ties to even, saturating at ±57344.
func ToE5M2(f float32) E5M2 { return E5M2(e5m2().encode(f)) }

// Float32 widens e exactly (NaN for S.1111.111).
func (e E4M3) Float32() float32 {
	if uint8(e)&0x7f == 0x7f {
		return float32(math.NaN())
	}
	return e4m3().decode(uint8(e))
}

// Float32 widens e exactly (±Inf for S.11111.00, NaN above).
func (e E5M2) Float32() float32 {
	switch m := uint8(e) & 0x7f; {
	case m == 0x7c:
		return float32(math.Copysign(math.Inf(1), float64(1-int(e>>7)*2)))
	case m > 0x7c:
		return float32(math.NaN())
	}
	return e5m2().decode(uint8(e))
}

// decode is a finite code's value: (1 + m/2^man)·2^(e−bias), or
// m/2^man·2^(1−bias) for e = 0.
func (f fp8) decode(c uint8) float32 {
	e := int(c&0x7f) >> f.man
	m := float64(c & (1<<f.man - 1))
	var v float64
	if e == 0 {
		v = math.Ldexp(m, 1-f.bias-int(f.man))
	} else {
		v = math.Ldexp(m+float64(int(1)<<f.man), e-f.bias-int(f.man))
	}
	if c&0x80 != 0 {
		v = -v
	}
	return float32(v)
}

// encode rounds to nearest even on the fp32 bits, as ToF16 does: the
// code's bits (exponent then mantissa) are monotone in the magnitude, so a
// rounding carry moves into the exponent correctly.
func (f fp8) encode(x float32) uint8 {
	u := math.Float32bits(x)
	sign := uint8(u>>24) & 0x80
	a := u & 0x7fffffff
	switch {
	case a > 0x7f800000: // NaN
		return sign | f.nan
	case a >= math.Float32bits(f.decode(f.max)): // saturate (Inf too)
		return sign | f.max
	case a < 0x00800000: // zero or an fp32 subnormal: far below half the smallest fp8 subnormal
		return sign
	}
	m := a&0x7fffff | 0x800000 // the 24-bit significand: x = m·2^(exp−23)
	e := int(a>>23) - 127 + f.bias
	shift := 23 - f.man
	var q uint32
	if e <= 0 { // subnormal (or zero) in fp8
		shift += uint(1 - e)
		if shift > 25 {
			return sign
		}
		q = 0
	} else {
		q = uint32(e) << f.man
		m &= 0x7fffff // the normal's implicit one is in the exponent field
	}
	half := uint32(1) << (shift - 1)
	rest := m & (1<<shift - 1)
	q += m >> shift
	if rest > half || (rest == half && q&1 == 1) {
		q++
	}
	if q > uint32(f.max) {
		q = uint32(f.max)
	}
	return sign | uint8(q)
}
