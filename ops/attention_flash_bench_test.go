package ops

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkAttentionFwdBwd times one forward and one backward of causal
// attention, materialising (AttentionForward/Backward, the (B,NH,T,T)
// probabilities kept) against FlashAttentionForward/Backward, one thread,
// on the reference model's heads (C=256, NH=4, HS=64) with B·T = 2048
// tokens. It reports tokens/s and the bytes each keeps for its backward
// beyond qkv (act_MB: out plus att or lse, FlashAttentionActBytes).
func BenchmarkAttentionFwdBwd(b *testing.B) {
	const C, NH = 256, 4
	for _, T := range []int{256, 1024, 4096} {
		B := max(1, 2048/T)
		for _, flash := range []bool{false, true} {
			name := map[bool]string{false: "naive", true: "flash"}[flash]
			b.Run(fmt.Sprintf("T%d/B%d/%s", T, B, name), func(b *testing.B) {
				k := newKernelsConfig(b, Config{Threads: 1})
				r := rand.New(rand.NewPCG(1, 2))
				qkv, dout := randn(r, B*T*3*C, 1), randn(r, B*T*C, 1)
				out, dqkv := make([]float32, B*T*C), make([]float32, B*T*3*C)
				var step func()
				if flash {
					lse := make([]float32, B*NH*T)
					step = func() {
						FlashAttentionForward(k, out, lse, qkv, B, T, C, NH)
						FlashAttentionBackward(k, dqkv, dout, qkv, out, lse, B, T, C, NH)
					}
				} else {
					att, scratch := make([]float32, B*NH*T*T), make([]float32, AttentionScratchSize(k, B, T, NH))
					step = func() {
						AttentionForward(k, out, att, qkv, B, T, C, NH)
						AttentionBackward(k, dqkv, scratch, dout, qkv, att, B, T, C, NH)
					}
				}
				step()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					step()
				}
				b.ReportMetric(float64(B*T)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
				b.ReportMetric(float64(FlashAttentionActBytes(B, T, C, NH, flash))/(1<<20), "act_MB")
			})
		}
	}
}

// BenchmarkAttentionFlashVsNaive runs the two of BenchmarkAttentionFwdBwd
// alternately, one forward and one backward each per iteration, and
// reports the best (least disturbed) time of each pass, its GFLOP/s and
// the ratio of the sums, speedup = naive/flash: on a shared machine a
// ratio of side-by-side minima is steadier than two separate means.
// T=4096 (B=1) needs 0.5 GiB for the naive kernel's probabilities and
// scratch.
//
// Flops are each kernel's own causal products, counted on the triangle
// (attnProductFlops): 2 in either forward, 4 in the materialising
// backward, 5 in the flash backward (S = Q·Kᵀ again).
func BenchmarkAttentionFlashVsNaive(b *testing.B) {
	const C, NH = 256, 4
	for _, T := range []int{256, 1024, 4096} {
		B := max(1, 2048/T)
		b.Run(fmt.Sprintf("T%d/B%d", T, B), func(b *testing.B) {
			k := newKernelsConfig(b, Config{Threads: 1})
			r := rand.New(rand.NewPCG(1, 2))
			qkv, dout := randn(r, B*T*3*C, 1), randn(r, B*T*C, 1)
			out, dqkv := make([]float32, B*T*C), make([]float32, B*T*3*C)
			lse := make([]float32, B*NH*T)
			att, scratch := make([]float32, B*NH*T*T), make([]float32, AttentionScratchSize(k, B, T, NH))
			passes := []struct {
				name     string
				products float64
				run      func()
			}{
				{"flash_fwd", 2, func() { FlashAttentionForward(k, out, lse, qkv, B, T, C, NH) }},
				{"flash_bwd", 5, func() { FlashAttentionBackward(k, dqkv, dout, qkv, out, lse, B, T, C, NH) }},
				{"naive_fwd", 2, func() { AttentionForward(k, out, att, qkv, B, T, C, NH) }},
				{"naive_bwd", 4, func() { AttentionBackward(k, dqkv, scratch, dout, qkv, att, B, T, C, NH) }},
			}
			best := []float64{math.Inf(1), math.Inf(1), math.Inf(1), math.Inf(1)}
			for _, p := range passes {
				p.run()
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for j, p := range passes {
					t0 := time.Now()
					p.run()
					best[j] = min(best[j], time.Since(t0).Seconds())
				}
			}
			flops := attnProductFlops(B, T, C, NH)
			for j, p := range passes {
				b.ReportMetric(best[j]*1e3, p.name+"_ms")
				b.ReportMetric(p.products*flops/best[j]/1e9, p.name+"_GFLOP/s")
			}
			b.ReportMetric(best[2]/best[0], "speedup_fwd")
			b.ReportMetric(best[3]/best[1], "speedup_bwd")
			b.ReportMetric((best[2]+best[3])/(best[0]+best[1]), "speedup")
		})
	}
}

// attnProductFlops is the flops of one causal attention product over all
// heads, (T,HS)·(HS,T) or (T,T)·(T,HS) on the lower triangle with its
// diagonal: B·NH·T(T+1)/2·HS multiply-adds.
func attnProductFlops(B, T, C, NH int) float64 {
	return 2 * float64(B*NH) * float64(T) * float64(T+1) / 2 * float64(C/NH)
}
