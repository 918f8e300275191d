package profile

import (
	"context"
	"math"
	"math/rand/v2"
	"time"

	"trellis/ops"
)

// RingTiming is one cp = 2 rank's ring-attention tiles timed
// (ops.AttentionTileForward/Backward, what model/ring.go runs under cp)
// on a (B, T, C, NH) attention: the sequence in 2·cp = 4 chunks of Tile =
// T/4 positions, the rank holding chunks 0 and 3 (the balanced split) and
// meeting every key chunk once over the ring: per head the tiles (0,0)
// and (3,3) causal, (3,0), (3,1), (3,2) whole.
type RingTiming struct {
	B, T, C, NH  int
	Tile         int     // rows of a tile: T/(2·cp)
	Tiles        int     // the rank's tiles: B·NH·(2·cp+1)
	Fwd, Bwd     float64 // seconds of the rank's tiles
	FlopsForward float64 // the planner's count for the rank: 4·heads·(T/cp)·T·d·½
}

// RingSample is the ring tiles timed at the flash sample's shape and at
// a small layer's, and the planner's two constants fitted to
// them (fitRing).
type RingSample struct {
	Shapes        []RingTiming
	PlannerEffOut float64 // ring_attn_efficiency
	TileSeconds   float64 // ring_tile_us, in seconds
}

// measureRing times one cp = 2 rank's ring-attention tiles, forward and
// backward, at the shape of a (the flash sample) and at a small layer's
// (4 heads, h = 128, s = 128, B = 2: tiles of 32 rows of 32, where a
// tile's fixed cost is most of its time), and
// fits the planner's ring_attn_efficiency η and per-tile cost γ to both
// (fitRing).
func measureRing(ctx context.Context, c Config, k *ops.Kernels, peak float64, a AttnSample) (RingSample, error) {
	// γ is a difference of two timings: the two shapes are timed in
	// gemmPasses interleaved passes, each keeping its fastest, so that a
	// load coming and going slows both alike (one 40 ms pass each gave γ
	// from 2.7 to 6.0 µs between profiles minutes apart).
	budget := 200 * time.Millisecond
	if c.Quick {
		budget = 80 * time.Millisecond
	}
	var s RingSample
	var ranks []*ringRank
	for i, sh := range []AttnSample{a, {B: 2, T: 128, C: 128, NH: 4}} {
		g := RingTiming{B: sh.B, T: sh.T, C: sh.C, NH: sh.NH, Tile: sh.T / 4, Tiles: sh.B * sh.NH * 5}
		g.FlopsForward = 4 * float64(g.B*g.NH) * float64(g.T/2) * float64(g.T) * float64(g.C/g.NH) * 0.5
		s.Shapes = append(s.Shapes, g)
		ranks = append(ranks, newRingRank(k, rand.New(rand.NewPCG(7, uint64(8+i))), g))
	}
	for pass := 0; pass < gemmPasses; pass++ {
		for i, r := range ranks {
			g := &s.Shapes[i]
			fwd, err := timeIt(ctx, budget/gemmPasses, r.forward)
			if err != nil {
				return s, err
			}
			r.forward()
			bwd, err := timeIt(ctx, budget/gemmPasses, r.backward)
			if err != nil {
				return s, err
			}
			if pass == 0 || fwd < g.Fwd {
				g.Fwd = fwd
			}
			if pass == 0 || bwd < g.Bwd {
				g.Bwd = bwd
			}
		}
	}
	s.PlannerEffOut, s.TileSeconds = fitRing(s.Shapes, peak)
	return s, nil
}

// fitRing solves the planner's ring-attention time (plan's attentionCore
// and ringTileTime) for η and γ on two timings: a rank's tiles take
//
//	t_fwd + t_bwd = F·(1 + 2.5/0.8)/(η·peak) + n·γ
//
// for F its forward FLOPs and n its tiles, two linear equations in 1/η
// and γ. Where the solution has γ < 0 or η outside (0, 1] (timing noise)
// γ is 0 and η comes from the first (the larger) timing alone.
func fitRing(g []RingTiming, peak float64) (eff, tile float64) {
	w := func(t RingTiming) (f, n, sec float64) {
		return t.FlopsForward * (1 + 2.5/0.8) / peak, float64(t.Tiles), t.Fwd + t.Bwd
	}
	f1, n1, t1 := w(g[0])
	if len(g) > 1 {
		f2, n2, t2 := w(g[1])
		if det := f1*n2 - f2*n1; det != 0 {
			inv, gam := (t1*n2-t2*n1)/det, (f1*t2-f2*t1)/det
			if gam >= 0 && inv >= 1 {
				return 1 / inv, gam
			}
		}
	}
	return f1 / t1, 0
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

func newRingRank(k *ops.Kernels, r *rand.Rand, s RingTiming) *ringRank {
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
