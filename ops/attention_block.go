package ops

import (
	"math"

	"trellis/tensor"
)

// AttnTile is one (query chunk, key chunk) pair of one head for a
// blockwise attention that merges its partial results outside the kernel
// (the ring attention of model/ring.go): C query rows of Q and C key and
// value rows of K and V, each HS wide, at row strides LDQ and LDKV (a head
// of a (B,T,qkv) tensor addressed in place), the scores scaled by Scale
// (1/√HS) and, on the diagonal tile (the same chunk of positions), masked
// causally: query i sees keys j ≤ i.
type AttnTile struct {
	Q, K, V   []float32
	LDQ, LDKV int
	C, HS     int
	Diag      bool
	Scale     float32
}

// keys is how many keys query row i sees.
func (t AttnTile) keys(i int) int {
	if t.Diag {
		return i + 1
	}
	return t.C
}

// scores sets S (C, C) = Q·Kᵀ (unscaled).
func (k *Kernels) tileScores(t AttnTile, S []float32) {
	k.Gemm(GEMM{Layout: NT, M: t.C, N: t.C, K: t.HS, A: tensor.F32s(t.Q), LDA: t.LDQ, B: tensor.F32s(t.K), LDB: t.LDKV, C: S, LDC: t.C})
}

// AttentionTileForward merges tile t into the running output O (C, HS)
// at row stride LDO, whose rows' running maxima m and sums l (C each) it
// updates — the online softmax of flash attention:
//
//	m' = max(m, max_j s_ij)    l' = l·e^(m−m') + Σ_j e^(s_ij−m')
//	o' = o·e^(m−m') + Σ_j e^(s_ij−m')·v_j          (s = Scale·q·kᵀ)
//
// with S (C, C) as scratch. A row never seen has m = −∞, l = 0, o = 0;
// the caller ends with o/l and lse = m + ln l. On AVX-512 the step is
// flash attention's tile kernel (tileOnlineAVX512).
func (k *Kernels) AttentionTileForward(t AttnTile, O []float32, LDO int, m, l, S []float32) {
	c := t.C
	S = S[:c*c]
	k.tileScores(t, S)
	if k.simd() {
		k.tileOnlineAVX512(t, O, LDO, m, l, S)
	} else {
		for i := 0; i < c; i++ {
			nk := t.keys(i)
			row := S[i*c : (i+1)*c]
			mo := m[i]
			mn := max(mo, t.Scale*rowMax(row[:nk]))
			sum := rowExp(row[:nk], row[:nk], t.Scale, mn)
			clear(row[nk:])
			alpha := float32(math.Exp(float64(mo - mn)))
			l[i] = l[i]*alpha + sum
			m[i] = mn
			if alpha != 1 {
				rowScale(O[i*LDO:i*LDO+t.HS], alpha)
			}
		}
	}
	k.Gemm(GEMM{Layout: NN, M: c, N: t.HS, K: c, A: tensor.F32s(S), LDA: c, B: tensor.F32s(t.V), LDB: t.LDKV, C: O, LDC: LDO, Acc: true})
}

// tileStackRows is the most rows whose m, l and α tileOnlineAVX512
// keeps on the stack (a longer chunk allocates them).
const tileStackRows = 256

// tileOnlineAVX512 is the forward's online-softmax step of a tile on
// AVX-512: flash attention's tile kernel (flashExpTileAVX512: P in place
// of S, m and l updated, α = e^(m−m') per row) on a copy of the rows' m
// and l, then O's rows scaled by α (scaleRowsAVX512).
func (k *Kernels) tileOnlineAVX512(t AttnTile, O []float32, LDO int, m, l, S []float32) {
	c := t.C
	n0 := c // every row sees the whole key chunk
	if t.Diag {
		n0 = 1
	}
	var stack [3 * tileStackRows]float32 // m, l, α of the rows
	mla := stack[:]
	if c > tileStackRows {
		mla = make([]float32, 3*c)
	}
	copy(mla[:c], m[:c])
	copy(mla[c:2*c], l[:c])
	_ = S[c*c-1]
	flashExpTileAVX512(&S[0], c, n0, c, c, t.Scale, &mla[0], c)
	copy(m[:c], mla[:c])
	copy(l[:c], mla[c:2*c])
	_ = O[(c-1)*LDO+t.HS-1]
	scaleRowsAVX512(&O[0], LDO, t.HS, c, &mla[2*c])
}

// AttentionTileBackward accumulates tile t's gradients given the output
// gradient dO (C, HS) at row stride LDO, the rows' final log-sum-exps lse
// and D = rowsum(dO⊙O) (C each), recomputing P = e^(s − lse):
//
//	dV += Pᵀ·dO    dS = P⊙(dO·Vᵀ − D)·Scale    dQ += dS·K    dK += dSᵀ·Q
//
// into dQ (row stride LDDQ) and dK, dV (row stride LDDKV), with P and dS
// (C, C each) as scratch. On AVX-512 P and dS come from flash attention's
// tile kernel (flashGradTileAVX512: dS = P⊙(Scale·dP − Scale·D)).
func (k *Kernels) AttentionTileBackward(t AttnTile, dO []float32, LDO int, lse, D []float32, dQ []float32, LDDQ int, dK, dV []float32, LDDKV int, P, dS []float32) {
	c := t.C
	P, dS = P[:c*c], dS[:c*c]
	k.tileScores(t, P)
	k.Gemm(GEMM{Layout: NT, M: c, N: c, K: t.HS, A: tensor.F32s(dO), LDA: LDO, B: tensor.F32s(t.V), LDB: t.LDKV, C: dS, LDC: c})
	if k.simd() {
		n0 := c // every row sees the whole key chunk
		if t.Diag {
			n0 = 1
		}
		_, _, _ = lse[c-1], D[c-1], P[c*c-1]
		flashGradTileAVX512(&dS[0], &P[0], c, n0, c, c, c, t.Scale, &lse[0], &D[0])
	} else {
		for i := 0; i < c; i++ {
			nk := t.keys(i)
			p, ds := P[i*c:(i+1)*c], dS[i*c:(i+1)*c]
			rowExp(p[:nk], p[:nk], t.Scale, lse[i])
			clear(p[nk:])
			for j := range ds {
				ds[j] = p[j] * (ds[j] - D[i]) * t.Scale
			}
		}
	}
	k.Gemm(GEMM{Layout: TN, M: c, N: t.HS, K: c, A: tensor.F32s(P), LDA: c, B: tensor.F32s(dO), LDB: LDO, C: dV, LDC: LDDKV, Acc: true})
	k.Gemm(GEMM{Layout: NN, M: c, N: t.HS, K: c, A: tensor.F32s(dS), LDA: c, B: tensor.F32s(t.K), LDB: t.LDKV, C: dQ, LDC: LDDQ, Acc: true})
	k.Gemm(GEMM{Layout: TN, M: c, N: t.HS, K: c, A: tensor.F32s(dS), LDA: c, B: tensor.F32s(t.Q), LDB: t.LDQ, C: dK, LDC: LDDKV, Acc: true})
}

// RoPETableRows is the package's RoPETableRows.
func (k *Kernels) RoPETableRows(cos, sin []float32, first, n, HS int, theta float64) {
	RoPETableRows(cos, sin, first, n, HS, theta)
}
