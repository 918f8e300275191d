package ops

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// ringRank is one rank's tiles of a ring attention at cp = 2 (model/ring.go)
// over a (B,T,3·C) qkv of NH heads: rank 0 holds chunks 0 and 3 of the
// four of c = T/4 positions each and meets every key chunk once over the
// ring's two steps; the causal pairs are (0,0) and (3,3) diagonal and
// (3,0), (3,1), (3,2) whole: 4 tiles' worth, half the sequence's triangle.
type ringRank struct {
	k                  *Kernels
	B, T, C, NH, HS, c int
	qkv, dout, out     []float32
	dqkv, m, l, D      []float32
	S, S2              []float32
}

func newRingRank(k *Kernels, qkv, dout []float32, B, T, C, NH int) *ringRank {
	c := T / 4
	rows := B * NH * T
	return &ringRank{k: k, B: B, T: T, C: C, NH: NH, HS: C / NH, c: c, qkv: qkv, dout: dout,
		out: make([]float32, B*T*C), dqkv: make([]float32, B*T*3*C), m: make([]float32, rows), l: make([]float32, rows),
		D: make([]float32, rows), S: make([]float32, c*c), S2: make([]float32, c*c)}
}

// each calls f for every causal (query chunk, key chunk) tile of the rank.
func (r *ringRank) each(f func(t AttnTile, b, h, cq, ck int)) {
	W := 3 * r.C
	for b := 0; b < r.B; b++ {
		for h := 0; h < r.NH; h++ {
			for _, cq := range []int{0, 3} {
				for ck := 0; ck <= cq; ck++ {
					q, kv := (b*r.T+cq*r.c)*W+h*r.HS, (b*r.T+ck*r.c)*W+h*r.HS
					f(AttnTile{Q: r.qkv[q:], K: r.qkv[kv+r.C:], V: r.qkv[kv+2*r.C:], LDQ: W, LDKV: W, C: r.c, HS: r.HS,
						Diag: cq == ck, Scale: float32(1 / math.Sqrt(float64(r.HS)))}, b, h, cq, ck)
				}
			}
		}
	}
}

func (r *ringRank) forward() {
	for i := range r.m {
		r.m[i], r.l[i] = float32(math.Inf(-1)), 0
	}
	clear(r.out)
	r.each(func(t AttnTile, b, h, cq, _ int) {
		ri := (b*r.NH+h)*r.T + cq*r.c
		r.k.AttentionTileForward(t, r.out[(b*r.T+cq*r.c)*r.C+h*r.HS:], r.C, r.m[ri:ri+r.c], r.l[ri:ri+r.c], r.S)
	})
}

func (r *ringRank) backward() {
	W := 3 * r.C
	r.each(func(t AttnTile, b, h, cq, ck int) {
		ri, ko := (b*r.NH+h)*r.T+cq*r.c, (b*r.T+ck*r.c)*W+h*r.HS
		r.k.AttentionTileBackward(t, r.dout[(b*r.T+cq*r.c)*r.C+h*r.HS:], r.C, r.m[ri:ri+r.c], r.D[ri:ri+r.c],
			r.dqkv[(b*r.T+cq*r.c)*W+h*r.HS:], W, r.dqkv[ko+r.C:], r.dqkv[ko+2*r.C:], W, r.S, r.S2)
	})
}

// BenchmarkRingTilesVsFlash times one cp = 2 rank's ring-attention tiles
// (AttentionTileForward/Backward, ringRank) against flash attention
// (FlashAttentionForward/Backward) of the whole sequence, alternately,
// one thread, and reports the median of each pass's rate in the
// planner's FLOPs (plan.attentionCore): forward F = 4·heads·s_q·s·d·½
// (s_q = s/cp for a rank), backward 2.5·F, and ratio = flash's over the
// tiles' rate (forward and backward together). The shape of the
// agreement grid's cp rows (train's agreementJob: B = 2, T = 128, C =
// 128, NH = 4, so c = 32, HS = 32) and the profile's (C = 256, NH = 4,
// HS = 64, T = 256 and 1024).
func BenchmarkRingTilesVsFlash(b *testing.B) {
	for _, s := range []struct{ B, T, C, NH int }{{2, 128, 128, 4}, {1, 256, 256, 4}, {1, 1024, 256, 4}} {
		b.Run(fmt.Sprintf("B%d/T%d/C%d/NH%d", s.B, s.T, s.C, s.NH), func(b *testing.B) {
			k := newKernelsConfig(b, Config{Threads: 1})
			r := rand.New(rand.NewPCG(1, 2))
			B, T, C, NH := s.B, s.T, s.C, s.NH
			qkv, dout := randn(r, B*T*3*C, 1), randn(r, B*T*C, 1)
			out, dqkv, lse := make([]float32, B*T*C), make([]float32, B*T*3*C), make([]float32, B*NH*T)
			ring := newRingRank(k, qkv, dout, B, T, C, NH)
			F := 4 * float64(B*NH) * float64(T) * float64(T) * float64(C/NH) * 0.5 // the whole sequence's
			passes := []func(){
				func() { FlashAttentionForward(k, out, lse, qkv, B, T, C, NH, NH) },
				func() { FlashAttentionBackward(k, dqkv, dout, qkv, out, lse, B, T, C, NH, NH) },
				ring.forward, ring.backward,
			}
			secs := make([][]float64, len(passes))
			for _, f := range passes {
				f()
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for p, f := range passes {
					t0 := time.Now()
					f()
					secs[p] = append(secs[p], time.Since(t0).Seconds())
				}
			}
			med := make([]float64, len(passes))
			for p := range secs {
				slices.Sort(secs[p])
				med[p] = secs[p][len(secs[p])/2]
			}
			b.ReportMetric(F/med[0]/1e9, "flash_fwd_GFLOP/s")
			b.ReportMetric(2.5*F/med[1]/1e9, "flash_bwd_GFLOP/s")
			b.ReportMetric(F/2/med[2]/1e9, "tiles_fwd_GFLOP/s")
			b.ReportMetric(2.5*F/2/med[3]/1e9, "tiles_bwd_GFLOP/s")
			b.ReportMetric((3.5*F/(med[0]+med[1]))/(3.5*F/2/(med[2]+med[3])), "ratio")
		})
	}
}
