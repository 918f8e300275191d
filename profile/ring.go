package profile

import (
	"context"
	"math"
	"math/rand/v2"
	"time"

	"trellis/ops"
)

// RingSample is one context-parallel rank's ring-attention tiles timed
// (ops.AttentionTileForward/Backward, what model/ring.go runs under cp)
// at cp = 2 on the attention sample's (B, T, C, NH): the sequence in
// 2·cp = 4 chunks of Tile = T/4 positions, the rank holding chunks 0 and
// 3 (the balanced split) and meeting every key chunk once over the ring:
// tiles (0,0) and (3,3) causal, (3,0), (3,1), (3,2) whole, per head.
type RingSample struct {
	B, T, C, NH   int
	Tile          int     // rows of a tile: T/(2·cp)
	Fwd, Bwd      float64 // seconds of the rank's tiles
	FlopsForward  float64 // the planner's count for the rank: 4·heads·(T/cp)·T·d·½
	PlannerEffOut float64 // the ring_attn_efficiency that makes the planner's time equal the measured one
}

// measureRing times one cp = 2 rank's ring-attention tiles, forward and
// backward, at the shape of a (the flash sample), and converts them to
// the planner's efficiency as measureAttention does:
// η = F·(1 + 2.5/0.8) / (peak·(t_fwd + t_bwd)).
func measureRing(ctx context.Context, c Config, k *ops.Kernels, peak float64, a AttnSample) (RingSample, error) {
	s := RingSample{B: a.B, T: a.T, C: a.C, NH: a.NH, Tile: a.T / 4}
	budget := 150 * time.Millisecond
	if c.Quick {
		budget = 40 * time.Millisecond
	}
	r := newRingRank(k, rand.New(rand.NewPCG(7, 8)), s)
	var err error
	if s.Fwd, err = timeIt(ctx, budget, r.forward); err != nil {
		return s, err
	}
	r.forward()
	if s.Bwd, err = timeIt(ctx, budget, r.backward); err != nil {
		return s, err
	}
	s.FlopsForward = 4 * float64(s.B*s.NH) * float64(s.T/2) * float64(s.T) * float64(s.C/s.NH) * 0.5
	s.PlannerEffOut = s.FlopsForward * (1 + 2.5/0.8) / (peak * (s.Fwd + s.Bwd))
	return s, nil
}

// ringRank holds one rank's operands: qkv (B,T,3·C), dout (B,T,C), the
// running out, m and l (lse after the forward), D and the tiles' scratch.
type ringRank struct {
	k                  *ops.Kernels
	B, T, C, NH, HS, c int
	qkv, dout, out     []float32
	dqkv, m, l, D      []float32
	S, S2              []float32
}

func newRingRank(k *ops.Kernels, r *rand.Rand, s RingSample) *ringRank {
	B, T, C, NH, c := s.B, s.T, s.C, s.NH, s.Tile
	rows := B * NH * T
	return &ringRank{k: k, B: B, T: T, C: C, NH: NH, HS: C / NH, c: c,
		qkv: randSlice(r, B*T*3*C), dout: randSlice(r, B*T*C), out: make([]float32, B*T*C), dqkv: make([]float32, B*T*3*C),
		m: make([]float32, rows), l: make([]float32, rows), D: randSlice(r, rows), S: make([]float32, c*c), S2: make([]float32, c*c)}
}

// each calls f for every causal (query chunk, key chunk) tile of the rank.
func (r *ringRank) each(f func(t ops.AttnTile, b, h, cq, ck int)) {
	W := 3 * r.C
	scale := float32(1 / math.Sqrt(float64(r.HS)))
	for b := 0; b < r.B; b++ {
		for h := 0; h < r.NH; h++ {
			for _, cq := range []int{0, 3} {
				for ck := 0; ck <= cq; ck++ {
					q, kv := (b*r.T+cq*r.c)*W+h*r.HS, (b*r.T+ck*r.c)*W+h*r.HS
					f(ops.AttnTile{Q: r.qkv[q:], K: r.qkv[kv+r.C:], V: r.qkv[kv+2*r.C:], LDQ: W, LDKV: W, C: r.c, HS: r.HS,
						Diag: cq == ck, Scale: scale}, b, h, cq, ck)
				}
			}
		}
	}
}

// forward runs the rank's tiles into out, m and l from an empty start and
// leaves the rows' log-sum-exps in m (what the backward reads).
func (r *ringRank) forward() {
	for i := range r.m {
		r.m[i], r.l[i] = float32(math.Inf(-1)), 0
	}
	clear(r.out)
	r.each(func(t ops.AttnTile, b, h, cq, _ int) {
		ri := (b*r.NH+h)*r.T + cq*r.c
		r.k.AttentionTileForward(t, r.out[(b*r.T+cq*r.c)*r.C+h*r.HS:], r.C, r.m[ri:ri+r.c], r.l[ri:ri+r.c], r.S)
	})
	for i, l := range r.l {
		if l > 0 {
			r.m[i] += float32(math.Log(float64(l)))
		}
	}
}

// backward accumulates the rank's tiles' gradients into dqkv.
func (r *ringRank) backward() {
	W := 3 * r.C
	r.each(func(t ops.AttnTile, b, h, cq, ck int) {
		ri, ko := (b*r.NH+h)*r.T+cq*r.c, (b*r.T+ck*r.c)*W+h*r.HS
		r.k.AttentionTileBackward(t, r.dout[(b*r.T+cq*r.c)*r.C+h*r.HS:], r.C, r.m[ri:ri+r.c], r.D[ri:ri+r.c],
			r.dqkv[(b*r.T+cq*r.c)*W+h*r.HS:], W, r.dqkv[ko+r.C:], r.dqkv[ko+2*r.C:], W, r.S, r.S2)
	})
}
