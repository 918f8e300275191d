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
						FlashAttentionForward(k, out, lse, qkv, B, T, C, NH, NH)
						FlashAttentionBackward(k, dqkv, dout, qkv, out, lse, B, T, C, NH, NH)
					}
				} else {
					att, scratch := make([]float32, B*NH*T*T), make([]float32, AttentionScratchSize(k, B, T, NH))
					step = func() {
						AttentionForward(k, out, att, qkv, B, T, C, NH, NH)
						AttentionBackward(k, dqkv, scratch, dout, qkv, att, B, T, C, NH, NH)
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
// backward, 5 in the flash backward (S = Q·Kᵀ again). *_products are the
// products each pass runs in its micro-kernels (attnKernelFMAs: padding
// and the masked part of diagonal tiles included), in units of one
// triangle; roofline is the speedup flash would reach if it ran those
// multiply-adds at the peak (the higher of the FMA loop's and the
// micro-kernel's on L1 data, attnKernelRate) and nothing else, against
// the materialising kernel as measured.
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
				{"flash_fwd", 2, func() { FlashAttentionForward(k, out, lse, qkv, B, T, C, NH, NH) }},
				{"flash_bwd", 5, func() { FlashAttentionBackward(k, dqkv, dout, qkv, out, lse, B, T, C, NH, NH) }},
				{"naive_fwd", 2, func() { AttentionForward(k, out, att, qkv, B, T, C, NH, NH) }},
				{"naive_bwd", 4, func() { AttentionBackward(k, dqkv, scratch, dout, qkv, att, B, T, C, NH, NH) }},
			}
			best := []float64{math.Inf(1), math.Inf(1), math.Inf(1), math.Inf(1)}
			fmas := attnKernelFMAs(b, qkv, dout, out, lse, att, dqkv, scratch, B, T, C, NH)
			peak := 0.0
			if fmas[0] > 0 {
				peak = max(k.PeakGFLOPS(50*time.Millisecond), attnKernelRate(k))
			}
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
			if fmas[0] > 0 {
				for j, p := range passes {
					b.ReportMetric(fmas[j]/(flops/2), p.name+"_products")
				}
				b.ReportMetric((best[2]+best[3])/(2*(fmas[0]+fmas[1])/(peak*1e9)), "roofline")
			}
		})
	}
}

// attnProductFlops is the flops of one causal attention product over all
// heads, (T,HS)·(HS,T) or (T,T)·(T,HS) on the lower triangle with its
// diagonal: B·NH·T(T+1)/2·HS multiply-adds.
func attnProductFlops(B, T, C, NH int) float64 {
	return 2 * float64(B*NH) * float64(T) * float64(T+1) / 2 * float64(C/NH)
}

// BenchmarkAttentionKernelPeak reports attnKernelRate beside the FMA
// peak of the same binary (PeakGFLOPS).
func BenchmarkAttentionKernelPeak(b *testing.B) {
	k := newKernelsConfig(b, Config{Threads: 1})
	if !k.simd() {
		b.Skip("no AVX-512 row kernels")
	}
	var rate float64
	for i := 0; i < b.N; i++ {
		rate = max(rate, attnKernelRate(k))
	}
	b.ReportMetric(rate, "kernel_GFLOP/s")
	b.ReportMetric(k.PeakGFLOPS(50*time.Millisecond), "peak_GFLOP/s")
}

// attnKernelRate is the GFLOP/s of the attention products' micro-kernel
// on L1 data in the shape of a score tile (12 query rows read in place,
// row stride 3C = 768; 32 keys from a packed panel; k = HS = 64), best of
// 20 runs of 64 calls: the rate no attention kernel's products can beat.
func attnKernelRate(k *Kernels) float64 {
	const HS, lda, calls = 64, 768, 64
	r := rand.New(rand.NewPCG(3, 4))
	a, bp, c := randn(r, 12*lda, 1), randn(r, HS*32, 1), make([]float32, 12*256)
	kern := k.impl.rowKernels[12]
	best := math.Inf(1)
	for range 20 {
		t0 := time.Now()
		for j := range calls {
			kern(HS, &a[0], lda, &bp[0], 32, &c[(j%8)*32], 256, 32, nil, nil)
		}
		best = min(best, time.Since(t0).Seconds())
	}
	return 2 * 12 * 32 * HS * calls / best / 1e9
}

// attnKernelFMAs counts the multiply-adds each attention pass runs in its
// micro-kernels (tiles as computed, padding and the masked part of
// diagonal tiles included), one thread: flash forward and backward, then
// the materialising forward and backward. Zero off the tiled path.
func attnKernelFMAs(tb testing.TB, qkv, dout, out, lse, att, dqkv, scratch []float32, B, T, C, NH int) (counts [4]float64) {
	k := newKernelsConfig(tb, Config{Threads: 1})
	if !tiledAttn(k, C/NH) {
		return counts
	}
	n := new(float64)
	wrap := func(ks []microKernel, cols int) []microKernel {
		out := make([]microKernel, len(ks))
		for r, kf := range ks {
			if kf != nil {
				out[r] = func(kc int, a *float32, sa int, b *float32, sb int, c *float32, ldc int, cn int, src, bias *float32) {
					*n += float64(kc * r * cols)
					kf(kc, a, sa, b, sb, c, ldc, cn, src, bias)
				}
			}
		}
		return out
	}
	im := *k.impl
	im.rowKernels, im.kernels = wrap(im.rowKernels, im.nr), wrap(im.kernels, im.nr)
	kc := *k
	kc.impl = &im
	edge := wrap(edgeKernels16(k.impl), 16)
	g := newAttnGeom(&kc, T, C, NH, NH)
	head := func(fwd bool) {
		for bh := range B * NH {
			h := newFlashHead(&kc, g)
			if h.edge != nil {
				h.edge = edge
			}
			if fwd { // one key/value head per head: group bh is head bh
				h.forwardGroup(out, lse, qkv, bh)
			} else {
				h.backwardGroup(dqkv, dout, qkv, out, lse, bh)
			}
			h.release()
		}
	}
	steps := []func(){
		func() { head(true) },
		func() { head(false) },
		func() { AttentionForward(&kc, out, att, qkv, B, T, C, NH, NH) },
		func() { AttentionBackward(&kc, dqkv, scratch, dout, qkv, att, B, T, C, NH, NH) },
	}
	for i, f := range steps {
		*n = 0
		f()
		counts[i] = *n
	}
	return counts
}
