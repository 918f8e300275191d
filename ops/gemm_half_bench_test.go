package ops

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"trellis/tensor"
)

// BenchmarkMatMulHalf reports GFLOP/s (2·m·n·k flops per call) of
// MatMulBF16 and MatMulF16 beside MatMul (fp32) on the headline shape,
// 1024x768x3072, one thread, in every layout, on this CPU's best kernels.
func BenchmarkMatMulHalf(b *testing.B) {
	k, err := New(Config{Threads: 1})
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range []Layout{NN, NT, TN} {
		for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.F16} {
			s := mmBench{name: "1024x768x3072", l: l, m: 1024, k: 768, n: 3072}
			b.Run(fmt.Sprintf("%s/%v/%v", s.name, l, dt), func(b *testing.B) {
				benchMatMulDType(b, k, s, dt)
			})
		}
	}
}

func benchMatMulDType(b *testing.B, k *Kernels, s mmBench, dt tensor.DType) {
	na, nb, nc := s.strides()
	r := rand.New(rand.NewPCG(1, 1))
	a, bb, c := randSlice(r, na), randSlice(r, nb), make([]float32, nc)
	call := func() { k.MatMul(s.l, s.m, s.n, s.k, a, s.lda, bb, s.ldb, c, s.ldc, false) }
	switch dt {
	case tensor.BF16:
		a16, b16 := roundHalf(dt, a).([]tensor.BF16Bits), roundHalf(dt, bb).([]tensor.BF16Bits)
		call = func() { k.MatMulBF16(s.l, s.m, s.n, s.k, a16, s.lda, b16, s.ldb, c, s.ldc, false) }
	case tensor.F16:
		a16, b16 := roundHalf(dt, a).([]tensor.F16Bits), roundHalf(dt, bb).([]tensor.F16Bits)
		call = func() { k.MatMulF16(s.l, s.m, s.n, s.k, a16, s.lda, b16, s.ldb, c, s.ldc, false) }
	}
	call()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		call()
	}
	b.ReportMetric(2*float64(s.m)*float64(s.n)*float64(s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// BenchmarkMatMulBF16VsF32 runs MatMul and MatMulBF16 alternately on the
// headline shape (1024x768x3072, one thread) and reports the best
// GFLOP/s of each and their ratio: on a shared machine the ratio of
// side-by-side bests is steadier than two separate means.
func BenchmarkMatMulBF16VsF32(b *testing.B) {
	k, err := New(Config{Threads: 1})
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range []Layout{NN, NT, TN} {
		s := mmBench{name: "1024x768x3072", l: l, m: 1024, k: 768, n: 3072}
		b.Run(fmt.Sprintf("%s/%v", s.name, l), func(b *testing.B) {
			na, nb, nc := s.strides()
			r := rand.New(rand.NewPCG(1, 1))
			a, bb, c := randSlice(r, na), randSlice(r, nb), make([]float32, nc)
			a16, b16 := roundHalf(tensor.BF16, append([]float32(nil), a...)).([]tensor.BF16Bits), roundHalf(tensor.BF16, append([]float32(nil), bb...)).([]tensor.BF16Bits)
			f32 := func() { k.MatMul(s.l, s.m, s.n, s.k, a, s.lda, bb, s.ldb, c, s.ldc, false) }
			bf := func() { k.MatMulBF16(s.l, s.m, s.n, s.k, a16, s.lda, b16, s.ldb, c, s.ldc, false) }
			f32()
			bf()
			best32, best16 := math.Inf(1), math.Inf(1)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				f32()
				t1 := time.Now()
				bf()
				best32, best16 = min(best32, t1.Sub(t0).Seconds()), min(best16, time.Since(t1).Seconds())
			}
			flops := 2 * float64(s.m) * float64(s.n) * float64(s.k) / 1e9
			b.ReportMetric(flops/best32, "fp32_GFLOP/s")
			b.ReportMetric(flops/best16, "bf16_GFLOP/s")
			b.ReportMetric(best32/best16, "speedup")
		})
	}
}
