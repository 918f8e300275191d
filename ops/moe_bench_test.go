package ops

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"trellis/tensor"
)

// BenchmarkGroupedGemm: an MoE layer's expert GEMM, 8 experts × 256
// tokens, x_e (256, C)·W_eᵀ (2F_e, C) each, as one GroupedGemm call,
// against one dense GEMM of the same total size, (2048, C)·Wᵀ: the
// grouped call's GFLOP/s over the dense one's is what the experts cost
// beyond their flops. Shapes: C = 512, 2F_e = 1024 (the forward's
// gate_up, NT), and the weight gradient (TN: dW_e (2F_e, C) += dy_eᵀ·x_e).
func BenchmarkGroupedGemm(b *testing.B) {
	const E, T, C, N = 8, 256, 512, 1024
	r := rand.New(rand.NewPCG(3, 4))
	fill := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		return x
	}
	x, w, y := fill(E*T*C), fill(E*N*C), make([]float32, E*T*N)
	dy, dw := fill(E*T*N), make([]float32, E*N*C)
	for _, threads := range []int{1, 2} {
		k, err := New(Config{Threads: threads})
		if err != nil {
			b.Fatal(err)
		}
		for _, l := range []Layout{NT, TN} {
			grouped := make([]GEMM, E)
			for e := range E {
				if l == NT {
					grouped[e] = GEMM{Layout: NT, M: T, N: N, K: C, A: tensor.F32s(x[e*T*C : (e+1)*T*C]), LDA: C,
						B: tensor.F32s(w[e*N*C : (e+1)*N*C]), LDB: C, C: y[e*T*N : (e+1)*T*N], LDC: N}
				} else {
					grouped[e] = GEMM{Layout: TN, M: N, N: C, K: T, A: tensor.F32s(dy[e*T*N : (e+1)*T*N]), LDA: N,
						B: tensor.F32s(x[e*T*C : (e+1)*T*C]), LDB: C, C: dw[e*N*C : (e+1)*N*C], LDC: C, Acc: true}
				}
			}
			dense := GEMM{Layout: NT, M: E * T, N: N, K: C, A: tensor.F32s(x), LDA: C, B: tensor.F32s(w[:N*C]), LDB: C, C: y, LDC: N}
			if l == TN {
				dense = GEMM{Layout: TN, M: N, N: C, K: E * T, A: tensor.F32s(dy), LDA: N, B: tensor.F32s(x), LDB: C, C: dw[:N*C], LDC: C, Acc: true}
			}
			flops := 2 * float64(E*T) * N * C
			b.Run(fmt.Sprintf("%v/threads=%d/grouped", l, threads), func(b *testing.B) {
				for range b.N {
					k.GroupedGemm(grouped)
				}
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
			b.Run(fmt.Sprintf("%v/threads=%d/dense", l, threads), func(b *testing.B) {
				for range b.N {
					k.Gemm(dense)
				}
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}
