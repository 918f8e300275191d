package shm

import (
	"sync/atomic"
	"unsafe"

	"trellis/comm"
	"trellis/tensor"
)

// mem is a mapped segment (or part of one). Words that ranks share are
// accessed atomically at 8-byte aligned offsets; payload regions are plain
// memory ordered by those words (a rank writes a region, then publishes a
// counter; a peer reads the region only after it has loaded that value).
type mem []byte

func (m mem) u32(off int) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&m[off])) }
func (m mem) u64(off int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&m[off])) }

// at is n bytes at off.
func (m mem) at(off, n int) []byte { return m[off : off+n : off+n] }

// bytesOf views b's elements as bytes.
func bytesOf(b comm.Buf) []byte {
	if b.DType() == tensor.BF16 {
		s := b.BFloat16s()
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 2*len(s))
	}
	s := b.Float32s()
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 4*len(s))
}

// asBuf views the first n elements of dtype dt in b (at least n·size
// bytes, 4-byte aligned) as a Buf.
func asBuf(b []byte, dt tensor.DType, n int) comm.Buf {
	p := unsafe.Pointer(unsafe.SliceData(b))
	if dt == tensor.BF16 {
		return comm.BF16(unsafe.Slice((*tensor.BF16Bits)(p), n))
	}
	return comm.F32(unsafe.Slice((*float32)(p), n))
}

// roundUp rounds n up to a multiple of a (a power of two).
func roundUp(n, a int) int { return (n + a - 1) &^ (a - 1) }
