package fp8

import (
	"testing"

	"trellis/tensor"
)

// BenchmarkQuantise is one (256, 1024) bf16 operand quantised per tensor
// and by DeepSeek-V3's 1×128 and 128×1 tiles (ns per element).
func BenchmarkQuantise(b *testing.B) {
	rows, cols := 256, 1024
	src := xorshift(rows*cols, 5, -8, 3)
	h := make([]uint16, len(src))
	for i, v := range src {
		h[i] = uint16(tensor.ToBF16(v))
	}
	dst, tmp := make([]uint16, len(src)), make([]float32, TmpLen(cols))
	for _, c := range []struct {
		name  string
		tile  Tile
		scale float32
	}{{"tensor", Tile{rows, cols}, 4}, {"1x128", Tile{1, 128}, 0}, {"128x1", Tile{128, 1}, 0}} {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				Quantise(dst, tensor.Halves(tensor.BF16, h), rows, cols, c.tile, E4M3, c.scale, tmp)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows*cols), "ns/elem")
		})
	}
}

// BenchmarkEncodeBF16 is tensor.EncodeBF16 over the same elements, the
// load's yardstick.
func BenchmarkEncodeBF16(b *testing.B) {
	src := xorshift(256*1024, 5, -8, 3)
	dst := make([]tensor.BF16Bits, len(src))
	for i := 0; i < b.N; i++ {
		tensor.EncodeBF16(dst, src)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(src)), "ns/elem")
}
