package device

import (
	"fmt"

	"trellis/tensor"
)

// Element types. A Buffer's bytes are what its dtype says: n elements of
// tensor.DType.Size() bytes each. The dtype's width lives in one place
// (tensor.DType.Size), so adding an element type touches tensor alone;
// a Buffer holds its elements as Data (fp32) or Bits (every 16-bit type).

// AllocOf returns a zeroed buffer of n elements of dt charged to tag at
// dt.Size() bytes each, or an *OOMError if the budget would be exceeded.
// fp32 buffers hold Data; 16-bit ones (bf16, fp16) hold Bits, viewed as
// bf16 through BF16.
//
// The allocator charges the tag it is given: under mixed precision the
// state strategy asks for its fp32 master weights as Optim and for the
// 16-bit compute copy as Param (parallel/zero).
func (d *Device) AllocOf(tag Tag, dt tensor.DType, n int) (*Buffer, error) {
	if n < 0 {
		return nil, fmt.Errorf("device %d: negative allocation of %d elements (%s)", d.id, n, tag)
	}
	if err := d.Reserve(tag, int64(n)*int64(dt.Size())); err != nil {
		return nil, err
	}
	b := &Buffer{tag: tag, dev: d, dtype: dt}
	switch dt.Size() {
	case 4:
		b.Data = d.reuse32(n)
	case 2:
		b.Bits = d.reuse16(n)
	default:
		panic(fmt.Sprintf("device: no storage for %s", dt))
	}
	return b, nil
}

// DType is the buffer's element type.
func (b *Buffer) DType() tensor.DType { return b.dtype }

// Len is the number of elements.
func (b *Buffer) Len() int {
	if b.dtype.Size() == 2 {
		return len(b.Bits)
	}
	return len(b.Data)
}

// BF16 views a bf16 buffer's elements (nil for any other dtype).
func (b *Buffer) BF16() []tensor.BF16Bits {
	if b.dtype != tensor.BF16 || len(b.Bits) == 0 {
		return nil
	}
	return tensor.BF16View(b.Bits)
}
