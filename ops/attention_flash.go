package ops

import (
	"fmt"
	"math"
)

// IO-aware causal attention (FlashAttention, Dao et al. 2022, with the
// loop order of FlashAttention-2) for this CPU: the (T,T) scores and
// probabilities never exist whole. Per head, query blocks of flashQBlock
// rows meet key blocks of flashKBlock keys (stopping at the diagonal);
// each block's scores S = Q_I·K_Jᵀ live in an L2-sized scratch block.
//
// Forward, per query row i, an online softmax over the key blocks: with
// the running maximum m and sum l,
//
//	m' = max(m, max_j scale·S_ij)        P_ij = exp(scale·S_ij − m')
//	l' = l·exp(m − m') + Σ_j P_ij        O_i = O_i·exp(m − m') + Σ_j P_ij·V_j
//
// and at the end O_i /= l, LSE_i = m + log l: only O and LSE are stored.
//
// Backward, with D_i = Σ_c dO_ic·O_ic, block by block:
//
//	P = exp(scale·Q_I·K_Jᵀ − LSE_I)      dP = dO_I·V_Jᵀ
//	dS = scale·P⊙(dP − D_I)
//	dV_J += Pᵀ·dO_I    dQ_I += dS·K_J    dK_J += dSᵀ·Q_I
//
// Keys after a query's position get P = 0. Activation memory is O(T) per
// head (LSE) beside the output; the scratch is two blocks and the head's
// packed Q, K, V, dO panels per worker.
const (
	flashQBlock = 192 // query rows per block: 16 tiles of the 12-row kernels
	flashKBlock = 256 // keys per block (a multiple of 32): a 192×256 block is 192 KiB
	// flashPad bounds how far past a query's last key (i, for query i)
	// the tiled block products read P and dS, which must be zero there: a
	// 12-row tile of dQ reads up to its last row's key, a 12-key tile of dK
	// or dV the rows from its first key's query on.
	flashPad = 12
)

// FlashAttentionForward is AttentionForward without the (B,NH,T,T)
// probabilities: per batch b and query head h, with Q the head's (T,HS)
// slice of qkv and K, V its key/value head's (grouped-query layout, see
// AttentionForward),
//
//	out[b,:,h·HS:(h+1)·HS] = softmax(mask(Q·Kᵀ/√HS))·V
//	lse[b,h,i] = log Σ_{j<=i} exp(Q_i·K_j/√HS)
//
//	out (B,T,C)   lse (B,NH,T) saved for the backward   qkv (B,T,(NH+2·KV)·HS)
//
// The (b, key/value head) pairs run in parallel, one goroutine each, the
// group's K and V read in place (packed once on the tiled path) by its G
// query heads in turn.
func FlashAttentionForward(k *Kernels, out, lse, qkv []float32, B, T, C, NH, KV int) {
	flashCheck(qkv, out, lse, B, T, C, NH, KV)
	g := newAttnGeom(k, T, C, NH, KV)
	forEachGroup(k, B*KV, func(ks *Kernels, _, bg int) {
		h := newFlashHead(ks, g)
		defer h.release()
		h.forwardGroup(out, lse, qkv, bg)
	})
}

// FlashAttentionBackward ACCUMULATES the gradient of FlashAttentionForward
// into dqkv, recomputing the probabilities from qkv and lse block by block
// (see the formulas above; dK and dV summed over the group's query heads);
// out is the forward's output.
//
//	dqkv (B,T,(NH+2·KV)·HS)   dout (B,T,C)   qkv (B,T,(NH+2·KV)·HS)   out (B,T,C)   lse (B,NH,T)
func FlashAttentionBackward(k *Kernels, dqkv, dout, qkv, out, lse []float32, B, T, C, NH, KV int) {
	flashCheck(qkv, out, lse, B, T, C, NH, KV)
	g := newAttnGeom(k, T, C, NH, KV)
	if len(dqkv) < B*T*g.ld || len(dout) < B*T*C {
		panic(fmt.Sprintf("ops: FlashAttentionBackward: dqkv %d or dout %d too short for B=%d T=%d C=%d", len(dqkv), len(dout), B, T, C))
	}
	forEachGroup(k, B*KV, func(ks *Kernels, _, bg int) {
		h := newFlashHead(ks, g)
		defer h.release()
		h.backwardGroup(dqkv, dout, qkv, out, lse, bg)
	})
}

// FlashAttentionActBytes is what attention keeps for its backward beyond
// its input qkv: the output and, flash, the per-row log-sum-exp (B,NH,T)
// or, not flash, the probabilities (B,NH,T,T); fp32.
func FlashAttentionActBytes(B, T, C, NH int, flash bool) int64 {
	per := int64(T) * int64(T)
	if flash {
		per = int64(T)
	}
	return 4 * (int64(B)*int64(T)*int64(C) + int64(B)*int64(NH)*per)
}

// flashCheck panics when a buffer is too short for (B, T, C, NH, KV).
func flashCheck(qkv, out, lse []float32, B, T, C, NH, KV int) {
	if NH <= 0 || KV <= 0 || C%NH != 0 || NH%KV != 0 || len(qkv) < B*T*(C+2*KV*(C/NH)) || len(out) < B*T*C || len(lse) < B*NH*T {
		panic(fmt.Sprintf("ops: flash attention: buffers qkv %d, out %d, lse %d too short for B=%d T=%d C=%d NH=%d KV=%d",
			len(qkv), len(out), len(lse), B, T, C, NH, KV))
	}
}

// forwardGroup runs the G query heads of group bg over its K and V,
// packed once (tiled path).
func (h *flashHead) forwardGroup(out, lse, qkv []float32, bg int) {
	kk, v := h.g.kv(qkv, bg)
	h.pack(kk, v, nil)
	mark := h.ap.mark()
	for bh := range h.g.heads(bg) {
		h.ap.reset(mark)
		h.forward(out, lse, qkv, bh)
	}
}

// backwardGroup runs the G query heads of group bg, each adding its
// share to the group's dK and dV, over the group's K and V packed once
// (tiled path).
func (h *flashHead) backwardGroup(dqkv, dout, qkv, out, lse []float32, bg int) {
	kk, v := h.g.kv(qkv, bg)
	h.pack(kk, v, kk)
	mark := h.ap.mark()
	for bh := range h.g.heads(bg) {
		h.ap.reset(mark)
		h.backward(dqkv, dout, qkv, out, lse, bh)
	}
}

// forward runs one head (the group's K and V packed by forwardGroup). Each band of query rows [i0, i0+rows) — one
// micro-kernel tile (12 rows, the first firstTile) on the tiled path,
// flashQBlock rows otherwise — walks the key blocks [0, i0+rows) of up to h.kb keys: its
// scores, probabilities and output rows stay in L1 across the key blocks.
func (h *flashHead) forward(out, lse, qkv []float32, bh int) {
	g := h.g
	q, kk, v, o := g.qkvo(qkv, out, bh)
	band := h.band(flashQBlock)
	kb := h.fkb
	s := h.ap.next(band * kb)
	mla := h.ap.next(3 * band) // per row: m, then l, then α (or 1/l at the end)
	m, l, al := mla[:band], mla[band:2*band], mla[2*band:]
	lrow := lse[bh*g.T : (bh+1)*g.T]
	first := h.firstTile()
	for i0, rows := 0, 0; i0 < g.T; i0 += rows {
		rows = min(band, g.T-i0)
		if i0 == 0 && first > 0 {
			rows = first
		}
		i1 := i0 + rows
		for r := range rows {
			m[r], l[r] = float32(math.Inf(-1)), 0
		}
		for j0 := 0; j0 < i1; j0 += kb {
			w := min(kb, i1-j0)
			h.abT(s, kb, q[i0*g.ld:], g.ld, i0, rows, kk, h.kt, j0, w)
			h.onlineTile(s, kb, i0-j0+1, w, rows, mla, band)
			if j0 > 0 { // O holds the earlier key blocks: rescale it
				scaleRows(h.simd, o[i0*g.C:], g.C, g.HS, al[:rows])
			}
			h.ab(o[i0*g.C:], g.C, s, kb, i0, rows, w, v, h.vp, j0, j0 > 0)
		}
		if h.simd {
			flashFinishAVX512(&m[0], &l[0], rows, &lrow[i0], &al[0])
		} else {
			for r := range rows {
				al[r] = 1 / l[r]
				lrow[i0+r] = m[r] + log32(l[r])
			}
		}
		scaleRows(h.simd, o[i0*g.C:], g.C, g.HS, al[:rows])
	}
}

// onlineTile is the forward's step for rows r < rows of a key block of
// scores s (row stride ld, w keys), row r seeing its first n0+r keys:
// onlineRow on each, with m, l and α of row r at mla[r], mla[band+r] and
// mla[2·band+r]. On AVX-512 one call runs the whole tile
// (flashExpTileAVX512).
func (h *flashHead) onlineTile(s []float32, ld, n0, w, rows int, mla []float32, band int) {
	m, l, al := mla[:band], mla[band:2*band], mla[2*band:]
	if h.simd {
		r0 := 0
		for ; r0 < rows && n0+r0 <= 0; r0++ { // queries before the block
			clear(s[r0*ld : r0*ld+w])
			al[r0] = 1
		}
		if r0 < rows {
			_, _ = s[(rows-1)*ld+w-1], al[rows-1]
			flashExpTileAVX512(&s[r0*ld], ld, n0+r0, w, rows-r0, h.g.scale, &m[r0], band)
		}
		return
	}
	for r := range rows {
		al[r] = h.onlineRow(s[r*ld:r*ld+w], n0+r, &m[r], &l[r])
	}
}

// onlineRow is the forward's step for one query row over a key block:
// srow holds its scores and receives P (zero past the nv keys it may
// see); m, l are updated, and it returns exp(m − m'), the factor of the
// row's O so far (0 for the first block, where m = −∞).
func (h *flashHead) onlineRow(srow []float32, nv int, m, l *float32) float32 {
	nv = min(nv, len(srow))
	if nv <= 0 { // every key of the block is after this query
		clear(srow)
		return 1
	}
	m1, sum := flashExpRow(srow[:nv], h.g.scale, *m)
	clear(srow[nv:])
	a := exp32(*m - m1)
	*l = *l*a + sum
	*m = m1
	return a
}

// scaleRows sets x[r·ld+i] *= a[r] for i < n, r < len(a).
func scaleRows(v bool, x []float32, ld, n int, a []float32) {
	if len(a) == 0 {
		return
	}
	_ = x[(len(a)-1)*ld+n-1]
	if v {
		scaleRowsAVX512(&x[0], ld, n, len(a), &a[0])
		return
	}
	for r, f := range a {
		rowScale(x[r*ld:r*ld+n], f)
	}
}

// backward runs one head (the group's K and V packed by backwardGroup,
// its Q and dO here): every (query, key) block of up to h.qb × h.kb
// on or below the diagonal, with D = rowsum(dO⊙O) per query. Within a block each
// band of rows (a 12-row tile on the tiled path) gets its S, dP, dS and
// dQ product while they are in L1; dK and dV take the whole block.
func (h *flashHead) backward(dqkv, dout, qkv, out, lse []float32, bh int) {
	g := h.g
	C3 := g.ld
	q, kk, v, dy := g.qkvo(qkv, dout, bh)
	dq, dk, dv, o := g.qkvo(dqkv, out, bh)
	h.packHead(q, dy)
	s, dp := h.ap.next(h.qb*h.kb), h.ap.next(h.qb*h.kb)
	d := h.ap.next(g.T)
	lrow := lse[bh*g.T : (bh+1)*g.T]
	band := h.band(h.qb)
	first := h.firstTile()
	for i0, rows := 0, 0; i0 < g.T; i0 += rows {
		rows = min(h.qb, g.T-i0)
		if i0 == 0 && first > 0 { // the short tile, then whole ones
			rows = min(h.qb-band+first, g.T)
		}
		i1 := i0 + rows
		// D of rows whose keys all lie in one block comes with their P
		// (Σ P⊙dP, gradTile); the others' from the output, read here.
		oneBlock := h.simd && i1 <= h.kb
		if !oneBlock {
			h.rowDots(d[i0:i1], dy[i0*g.C:], o[i0*g.C:])
		}
		for j0 := 0; j0 < i1; j0 += h.kb {
			w := min(h.kb, i1-j0)
			for t0, n := 0, 0; t0 < rows; t0 += n {
				n = min(band, rows-t0)
				if i0+t0 == 0 && first > 0 {
					n = first
				}
				it := i0 + t0
				st, dt := s[t0*h.kb:], dp[t0*h.kb:]
				h.abT(st, h.kb, q[it*C3:], C3, it, n, kk, h.kt, j0, w)
				h.abT(dt, h.kb, dy[it*g.C:], g.C, it, n, v, h.vt, j0, w)
				h.gradTile(dt, st, h.kb, it-j0+1, w, n, lrow[it:], d[it:], oneBlock)
				h.ab(dq[it*C3:], C3, dt, h.kb, it, n, w, kk, h.kp, j0, true)
			}
			h.aTb(dk[j0*C3:], C3, dp, h.kb, j0, w, i0, rows, q, C3, h.qp)
			h.aTb(dv[j0*C3:], C3, s, h.kb, j0, w, i0, rows, dy, g.C, h.dyp)
		}
	}
}

// gradTile recomputes P (into s) and sets dS (in ds, holding dP) for rows
// r < rows of a block (row stride ld, w keys), row r over the first
// nv = n0+r keys its query sees, with lse[r] and D = d[r] (with dot, on
// AVX-512 only, for rows that see no key past the block: D is set first
// to Σ P⊙dP over the row, which is rowsum(dO⊙O)); both rows are
// zeroed on [nv, nv+flashPad) within w on the tiled path (the products
// read that far past the diagonal), on [nv, w) otherwise. On AVX-512 one
// call runs the whole tile (flashGradTileAVX512).
func (h *flashHead) gradTile(ds, s []float32, ld, n0, w, rows int, lse, d []float32, dot bool) {
	pad := 1 << 30 // the portable path reads whole rows
	if h.tiled {
		pad = flashPad
	}
	if h.simd && rows > 0 {
		_, _, _, _ = ds[(rows-1)*ld+w-1], s[(rows-1)*ld+w-1], lse[rows-1], d[rows-1]
		if dot {
			flashGradDotTileAVX512(&ds[0], &s[0], ld, n0, w, pad, rows, h.g.scale, &lse[0], &d[0])
			return
		}
		flashGradTileAVX512(&ds[0], &s[0], ld, n0, w, pad, rows, h.g.scale, &lse[0], &d[0])
		return
	}
	for r := range rows {
		sr, dr := s[r*ld:r*ld+w], ds[r*ld:r*ld+w]
		nv := min(w, n0+r)
		if nv > 0 {
			flashGradRow(dr[:nv], sr[:nv], h.g.scale, lse[r], d[r])
		}
		nv = max(nv, 0)
		end := max(nv, min(w, n0+r+pad))
		clear(sr[nv:end])
		clear(dr[nv:end])
	}
}

// rowDots sets d[i] = Σ_c dy[i·C+c]·o[i·C+c] over the head's HS channels
// (D = rowsum(dO⊙O)) for i < len(d).
func (h *flashHead) rowDots(d, dy, o []float32) {
	g, n := h.g, len(d)
	if h.simd {
		_, _ = dy[(n-1)*g.C+g.HS-1], o[(n-1)*g.C+g.HS-1]
		rowDotsAVX512(&d[0], &dy[0], g.C, &o[0], g.C, g.HS, n)
		return
	}
	for i := range n {
		d[i] = dot32(dy[i*g.C:i*g.C+g.HS], o[i*g.C:i*g.C+g.HS])
	}
}

// flashExpRow is the online-softmax step over one row (the portable
// path of flashExpTileAVX512): with m0 the running maximum, m = max(m0,
// scale·max(s)), s[i] = exp(scale·s[i] − m); it returns m and Σ s.
// len(s) >= 1.
func flashExpRow(s []float32, scale, m0 float32) (m, sum float32) {
	m = max(m0, rowMax(s)*scale)
	return m, rowExp(s, s, scale, m)
}

// flashGradRow is the backward's step over one row (the portable path of
// flashGradTileAVX512): s[i] = P = exp(scale·s[i] − lse), ds[i] =
// scale·P·(ds[i] − d). len(s) >= len(ds).
func flashGradRow(ds, s []float32, scale, lse, d float32) {
	s = s[:len(ds)]
	for i, x := range s {
		p := exp32(x*scale - lse)
		s[i] = p
		ds[i] = scale * p * (ds[i] - d)
	}
}
