package ops

import (
	"math"
	"math/rand/v2"
	"testing"

	"trellis/tensor"
)

// TestEncodeBF16 holds the threaded (AVX-512 where present) roundings to
// tensor.ToBF16 and tensor.ToF16 bit for bit on random values, ties,
// denormals, the overflow edge, ±Inf and NaNs, at lengths with and without
// a tail.
func TestEncodeBF16(t *testing.T) {
	special := []uint32{0, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00001, 0xffa00000, 0x7f800001,
		0x3f808000, 0x3f818000, 0x3f80ffff, 0x00000001, 0x807fffff, 0x7f7fffff, 0x7f7f8000, 0xff7fffff,
		0x33000000, 0x33000001, 0x33800000, 0x387fc000, 0x477fe000, 0x477ff000, 0x3f801000, 0x3f803000}
	r := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{0, 1, 15, 16, 17, 100, 40000} {
		src := make([]float32, n)
		for i := range src {
			if i < len(special) {
				src[i] = math.Float32frombits(special[i])
			} else if i%3 == 0 {
				src[i] = math.Float32frombits(r.Uint32())
			} else {
				src[i] = float32(r.NormFloat64())
			}
		}
		for _, threads := range []int{1, 3} {
			k, err := New(Config{Threads: threads})
			if err != nil {
				t.Fatal(err)
			}
			got := make([]tensor.BF16Bits, n)
			EncodeBF16(k, got, src)
			for i, f := range src {
				if want := tensor.ToBF16(f); got[i] != want {
					t.Fatalf("n=%d threads=%d: element %d (%#08x): %#04x, want %#04x", n, threads, i, math.Float32bits(f), got[i], want)
				}
			}
			h := make([]tensor.F16Bits, n)
			EncodeF16(k, h, src)
			for i, f := range src {
				if want := tensor.ToF16(f); h[i] != want {
					t.Fatalf("fp16 n=%d threads=%d: element %d (%#08x): %#04x, want %#04x", n, threads, i, math.Float32bits(f), h[i], want)
				}
			}
		}
	}
}
