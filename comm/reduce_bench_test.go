package comm

import (
	"fmt"
	"testing"

	"trellis/tensor"
)

// BenchmarkReduceTo measures one all-reduce owner's work: fold chunk of p
// buffers and write it back to all of them, as a sum and as the average
// the gradient reductions take (its last step scales). Bytes are the
// chunk's bytes per buffer times p (what is read, and written).
func BenchmarkReduceTo(b *testing.B) {
	for _, op := range []ReduceOp{Sum, Avg} {
		for _, d := range []tensor.DType{tensor.F32, tensor.BF16} {
			for _, n := range []int{1 << 12, 1 << 22} {
				b.Run(fmt.Sprintf("%v/%v/p=4/n=%d", op, d, n), func(b *testing.B) {
					bufs := make([]Buf, 4)
					for i := range bufs {
						if d == tensor.BF16 {
							bufs[i] = BF16(make([]tensor.BF16Bits, n))
						} else {
							bufs[i] = F32(make([]float32, n))
						}
					}
					b.SetBytes(int64(4 * bufs[0].Bytes()))
					for i := 0; i < b.N; i++ {
						ReduceTo(bufs, bufs, op, 4)
					}
				})
			}
		}
	}
}
