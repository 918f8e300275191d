package ops

import (
	"math"
	"math/rand/v2"
	"testing"

	"trellis/tensor"
)

// DecodeBF16 and DecodeF16 equal tensor.DecodeBF16/F16 bit for bit, on
// every thread count, tails, subnormals, infinities and NaNs included —
// but a signalling fp16 NaN, which VCVTPH2PS quiets: a NaN there.
func TestDecodeHalf(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 7))
	for _, n := range []int{0, 1, 15, 16, 17, 1 << 14, 3<<14 + 5} {
		src := make([]uint16, n)
		for i := range src {
			src[i] = uint16(r.Uint32())
		}
		for _, threads := range []int{1, 2} {
			k, err := New(Config{Threads: threads})
			if err != nil {
				t.Fatal(err)
			}
			for _, f16 := range []bool{false, true} {
				got, want := make([]float32, n), make([]float32, n)
				if f16 {
					h := make([]tensor.F16Bits, n)
					for i, b := range src {
						h[i] = tensor.F16Bits(b)
					}
					DecodeF16(k, got, h)
					tensor.DecodeF16(want, h)
				} else {
					h := make([]tensor.BF16Bits, n)
					for i, b := range src {
						h[i] = tensor.BF16Bits(b)
					}
					DecodeBF16(k, got, h)
					tensor.DecodeBF16(want, h)
				}
				for i := range got {
					if f16 && math.IsNaN(float64(want[i])) && math.IsNaN(float64(got[i])) {
						continue
					}
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("n=%d threads=%d f16=%v: element %d (bits %#04x): %#08x, want %#08x", n, threads, f16, i, src[i],
							math.Float32bits(got[i]), math.Float32bits(want[i]))
					}
				}
			}
		}
	}
}
