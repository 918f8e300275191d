package hier

import (
	"unsafe"

	"trellis/comm"
	"trellis/tensor"
)

func newBuf(dt tensor.DType, n int) comm.Buf {
	if dt == tensor.BF16 {
		return comm.BF16(make([]tensor.BF16Bits, n))
	}
	return comm.F32(make([]float32, n))
}

func clone(b comm.Buf) comm.Buf {
	c := newBuf(b.DType(), b.Len())
	copyBuf(c, b)
	return c
}

func copyBuf(dst, src comm.Buf) { copy(bytesOf(dst), bytesOf(src)) }

// bytesOf views b's elements as bytes.
func bytesOf(b comm.Buf) []byte {
	if b.DType() == tensor.BF16 {
		s := b.BFloat16s()
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 2*len(s))
	}
	s := b.Float32s()
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 4*len(s))
}
