package ops

import (
	"fmt"
	"math/rand/v2"
	"testing"

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
