package tensor

import (
	"fmt"
	"math"
	"unsafe"
)

// DType names an element type.
type DType uint8

// The element types Trellis knows.
const (
	F32 DType = iota
	BF16
	F16
)

// Size is the width of one element in bytes.
func (d DType) Size() int {
	if d == F32 {
		return 4
	}
	return 2
}

func (d DType) String() string {
	switch d {
	case F32:
		return "fp32"
	case BF16:
		return "bf16"
	case F16:
		return "fp16"
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// ParseDType accepts fp32/f32/float32, bf16/bfloat16 and fp16/f16/float16.
func ParseDType(s string) (DType, error) {
	switch s {
	case "fp32", "f32", "float32":
		return F32, nil
	case "bf16", "bfloat16":
		return BF16, nil
	case "fp16", "f16", "float16", "half":
		return F16, nil
	}
	return 0, fmt.Errorf("tensor: unknown dtype %q (want fp32, bf16 or fp16)", s)
}

// Shape lists a tensor's dims, outermost first (row-major).
type Shape []int

// Numel is the product of the dims (1 for a scalar shape).
func (s Shape) Numel() int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

func (s Shape) String() string {
	out := "("
	for i, d := range s {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprint(d)
	}
	return out + ")"
}

// BF16Bits is a bfloat16 value: the top 16 bits of an fp32 (1 sign, 8 exponent,
// 7 mantissa bits).
type BF16Bits uint16

// ToBF16 rounds f to the nearest bfloat16, ties to even. NaN stays a quiet NaN
// with its sign; ±Inf stays ±Inf; values beyond the largest finite bf16 round
// to ±Inf.
func ToBF16(f float32) BF16Bits {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 { // NaN: keep sign and top payload, force quiet bit
		return BF16Bits(u>>16 | 0x0040)
	}
	// Round to nearest even: add 0x7fff plus the lowest kept bit, then truncate.
	u += 0x7fff + (u>>16)&1
	return BF16Bits(u >> 16)
}

// Float32 widens b to fp32 exactly.
func (b BF16Bits) Float32() float32 { return math.Float32frombits(uint32(b) << 16) }

// F16Bits is an IEEE 754 binary16 value (1 sign, 5 exponent, 10 mantissa bits).
type F16Bits uint16

// ToF16 rounds f to the nearest binary16, ties to even, with subnormals; NaN
// stays a quiet NaN with its sign; overflow rounds to ±Inf.
func ToF16(f float32) F16Bits {
	u := math.Float32bits(f)
	sign := uint16(u>>16) & 0x8000
	exp := int32(u>>23) & 0xff
	man := u & 0x7fffff
	switch {
	case exp == 0xff && man != 0: // NaN
		return F16Bits(sign | 0x7e00 | uint16(man>>13))
	case exp == 0xff: // Inf
		return F16Bits(sign | 0x7c00)
	}
	e := exp - 127 + 15 // rebias
	if e >= 0x1f {
		return F16Bits(sign | 0x7c00)
	}
	if e <= 0 {
		// Subnormal half (or zero): shift the full 24-bit significand.
		if e < -10 {
			return F16Bits(sign) // rounds to ±0 (below half the smallest subnormal)
		}
		m := man | 0x800000
		shift := uint32(14 - e) // 13 to drop to 10 bits, plus 1-e for the denormal shift
		half := uint32(1) << (shift - 1)
		rest := m & (1<<shift - 1)
		q := m >> shift
		if rest > half || (rest == half && q&1 == 1) {
			q++
		}
		return F16Bits(sign | uint16(q))
	}
	q := uint32(e)<<10 | man>>13
	rest := man & 0x1fff
	if rest > 0x1000 || (rest == 0x1000 && q&1 == 1) {
		q++ // may carry into the exponent, up to Inf, which is correct
	}
	return F16Bits(sign | uint16(q))
}

// Float32 widens h to fp32 exactly.
func (h F16Bits) Float32() float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp == 0 && man == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: normalise
		e := uint32(127 - 15 + 1)
		for man&0x400 == 0 {
			man <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (man&0x3ff)<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
}

// EncodeBF16 rounds src into dst; len(dst) must be at least len(src).
func EncodeBF16(dst []BF16Bits, src []float32) {
	dst = dst[:len(src)]
	for i, f := range src {
		dst[i] = ToBF16(f)
	}
}

// DecodeBF16 widens src into dst; len(dst) must be at least len(src).
func DecodeBF16(dst []float32, src []BF16Bits) {
	dst = dst[:len(src)]
	for i, b := range src {
		dst[i] = b.Float32()
	}
}

// EncodeF16 rounds src into dst; len(dst) must be at least len(src).
func EncodeF16(dst []F16Bits, src []float32) {
	dst = dst[:len(src)]
	for i, f := range src {
		dst[i] = ToF16(f)
	}
}

// DecodeF16 widens src into dst; len(dst) must be at least len(src).
func DecodeF16(dst []float32, src []F16Bits) {
	dst = dst[:len(src)]
	for i, h := range src {
		dst[i] = h.Float32()
	}
}

// BF16View views 16-bit storage as bf16 elements, without a copy (nil for
// an empty slice).
func BF16View(s []uint16) []BF16Bits {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*BF16Bits)(unsafe.Pointer(&s[0])), len(s))
}

// F16View views 16-bit storage as fp16 elements, without a copy (nil for
// an empty slice).
func F16View(s []uint16) []F16Bits {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*F16Bits)(unsafe.Pointer(&s[0])), len(s))
}
