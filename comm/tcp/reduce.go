package tcp

import (
	"unsafe"

	"trellis/comm"
	"trellis/tensor"
)

// Payloads travel as their in-memory bytes, which are little-endian on every
// platform New accepts (it refuses big-endian hosts). These views cost
// nothing; they alias the caller's slices.

// bytesOf is the byte view of a Buf's elements.
func bytesOf(b comm.Buf) []byte {
	if b.DType() == tensor.BF16 {
		s := b.BFloat16s()
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 2*len(s))
	}
	s := b.Float32s()
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 4*len(s))
}

// f32s views b (4-byte aligned, len a multiple of 4) as float32s.
func f32s(b []byte) []float32 {
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

// bf16s views b (2-byte aligned, len even) as bf16s.
func bf16s(b []byte) []tensor.BF16Bits {
	return unsafe.Slice((*tensor.BF16Bits)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/2)
}

// alignedBytes allocates n bytes aligned for float32 access.
func alignedBytes(n int) []byte {
	w := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), len(w)*8)[:n]
}

// isLittleEndian reports the host byte order.
func isLittleEndian() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}

// reducer combines two payloads elementwise, dst[i] = dst[i] ⊕ src[i], with
// comm.Reduce: ⊕ is + for Sum and Avg (Avg scales once, at the end, see
// finish) and max for Max (NaN propagates); bf16 widens to fp32, combines
// and rounds once per call, so once per step of an algorithm.
type reducer struct {
	dt tensor.DType
	op comm.ReduceOp
}

// view is the Buf over b's bytes.
func (r reducer) view(b []byte) comm.Buf {
	if r.dt == tensor.BF16 {
		return comm.BF16(bf16s(b))
	}
	return comm.F32(f32s(b))
}

func (r reducer) apply(dst, src []byte) {
	d := r.view(dst)
	comm.Reduce(d, []comm.Buf{d, r.view(src)}, r.op, 0)
}

// fold sets dst = srcs[0] ⊕ srcs[1] ⊕ … left to right, scaled by
// comm.AvgScale(p) for Avg: the same sums in the same order on every rank.
func (r reducer) fold(dst []byte, srcs [][]byte, p int) {
	bs := make([]comm.Buf, len(srcs))
	for i, s := range srcs {
		bs[i] = r.view(s)
	}
	comm.Reduce(r.view(dst), bs, r.op, p)
}

// finish applies Avg's scale to a fully reduced chunk; other ops need none.
func (r reducer) finish(b []byte, p int) {
	if r.op == comm.Avg {
		d := r.view(b)
		comm.Reduce(d, []comm.Buf{d}, comm.Avg, p)
	}
}
