package ops

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Tiles merged over every causal (query chunk, key chunk) pair of a head
// give the materialising kernel's output (forward) and, with its
// log-sum-exps, FlashAttentionBackward's gradients (backward): one head
// of T = 3·c tokens in chunks of c, on the portable kernels and on this
// CPU's (AVX-512's flash tile kernels).
func TestAttentionTilesMatchWholeAttention(t *testing.T) {
	for _, isa := range []string{"generic", "auto"} {
		t.Run(isa, func(t *testing.T) {
			k, err := New(Config{Threads: 1, ISA: isa})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []int{8, 40} { // under a vector and across 16-lane ones
				attentionTilesMatch(t, k, c)
			}
		})
	}
}

func attentionTilesMatch(t *testing.T, k *Kernels, c int) {
	const n, HS = 3, 16
	T, W := c*n, 3*HS
	r := rand.New(rand.NewPCG(3, 4))
	qkv, dout := make([]float32, T*W), make([]float32, T*HS)
	for i := range qkv {
		qkv[i] = float32(r.NormFloat64())
	}
	for i := range dout {
		dout[i] = float32(r.NormFloat64())
	}
	want, att := make([]float32, T*HS), make([]float32, T*T)
	k.AttentionForward(want, att, qkv, 1, T, HS, 1, 1)
	out, m, l := make([]float32, T*HS), make([]float32, T), make([]float32, T)
	for i := range m {
		m[i] = float32(math.Inf(-1))
	}
	S, S2 := make([]float32, c*c), make([]float32, c*c)
	tile := func(cq, ck int) AttnTile {
		return AttnTile{Q: qkv[cq*c*W:], K: qkv[ck*c*W+HS:], V: qkv[ck*c*W+2*HS:], LDQ: W, LDKV: W, C: c, HS: HS,
			Diag: cq == ck, Scale: float32(1 / math.Sqrt(HS))}
	}
	for cq := 0; cq < n; cq++ {
		for ck := 0; ck <= cq; ck++ {
			k.AttentionTileForward(tile(cq, ck), out[cq*c*HS:], HS, m[cq*c:], l[cq*c:], S)
		}
	}
	lse := make([]float32, T)
	for i := 0; i < T; i++ {
		rowScale(out[i*HS:(i+1)*HS], 1/l[i])
		lse[i] = m[i] + float32(math.Log(float64(l[i])))
	}
	if e := maxRel(out, want); e > 1e-5 {
		t.Fatalf("c=%d forward: relative error %.3g against AttentionForward", c, e)
	}
	wantD := make([]float32, T*W)
	flse := make([]float32, T)
	fout := make([]float32, T*HS)
	k.FlashAttentionForward(fout, flse, qkv, 1, T, HS, 1, 1)
	k.FlashAttentionBackward(wantD, dout, qkv, fout, flse, 1, T, HS, 1, 1)
	D := make([]float32, T)
	for i := range D {
		for x := 0; x < HS; x++ {
			D[i] += dout[i*HS+x] * out[i*HS+x]
		}
	}
	got := make([]float32, T*W)
	for cq := 0; cq < n; cq++ {
		for ck := 0; ck <= cq; ck++ {
			k.AttentionTileBackward(tile(cq, ck), dout[cq*c*HS:], HS, lse[cq*c:], D[cq*c:], got[cq*c*W:], W,
				got[ck*c*W+HS:], got[ck*c*W+2*HS:], W, S, S2)
		}
	}
	if e := maxRel(got, wantD); e > 1e-5 {
		t.Fatalf("c=%d backward: relative error %.3g against FlashAttentionBackward", c, e)
	}
}

// maxRel is max|a−b| / max|b|.
func maxRel(a, b []float32) float64 {
	var d, s float64
	for i := range b {
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
		s = max(s, math.Abs(float64(b[i])))
	}
	return d / s
}
