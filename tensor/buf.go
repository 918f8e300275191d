package tensor

import "fmt"

// Buf is a run of elements of one dtype in host memory: fp32 values, or
// bf16 or fp16 values as their bits. It is what the engine passes where a
// buffer's element type is decided by the precision policy (a layer's
// weights, a saved activation, a GEMM operand), so that every consumer
// reads the type from the buffer instead of from a separate flag. The zero
// value is an empty fp32 buffer.
type Buf struct {
	dt DType
	f  []float32
	h  []uint16
}

// F32s wraps fp32 values.
func F32s(x []float32) Buf { return Buf{dt: F32, f: x} }

// Halves wraps 16-bit values of dtype dt (BF16 or F16) as their bits.
func Halves(dt DType, x []uint16) Buf {
	if dt != BF16 && dt != F16 {
		panic(fmt.Sprintf("tensor: Halves of %s", dt))
	}
	return Buf{dt: dt, h: x}
}

// DType is the element type.
func (b Buf) DType() DType { return b.dt }

// Len is the number of elements.
func (b Buf) Len() int {
	if b.dt == F32 {
		return len(b.f)
	}
	return len(b.h)
}

// F32 is the fp32 elements; it panics on a 16-bit buffer (a programming
// error: the caller should have looked at DType).
func (b Buf) F32() []float32 {
	if b.dt != F32 {
		panic(fmt.Sprintf("tensor: F32 of a %s buffer", b.dt))
	}
	return b.f
}

// Bits is the 16-bit elements' bits; it panics on an fp32 buffer.
func (b Buf) Bits() []uint16 {
	if b.dt == F32 {
		panic("tensor: Bits of an fp32 buffer")
	}
	return b.h
}

// Slice is elements [lo, hi).
func (b Buf) Slice(lo, hi int) Buf {
	if b.dt == F32 {
		return Buf{dt: F32, f: b.f[lo:hi:hi]}
	}
	return Buf{dt: b.dt, h: b.h[lo:hi:hi]}
}

// Head is the first n elements.
func (b Buf) Head(n int) Buf { return b.Slice(0, n) }
