package ops

import "fmt"

// The tiled causal path of AttentionForward and AttentionBackward: the
// AVX-512 micro-kernels driven directly over one head's whole (T,T)
// products, 12 query (or key) rows at a time, each row panel stopping at
// the diagonal: query rows [i0, i0+r) need keys [0, i0+r) only, and key
// rows [j0, j0+r) are reached only by queries [j0, T). So the products do
// about half of the (T,T) work, each with a long inner dimension. The
// head's Q, K, V, dY slices are packed once into contiguous panels where
// they are B operands; the scores and probabilities are read in place.
// The softmax of a row panel runs while its scores are in L1.

// tiledAttn says whether the tiled path runs for head size hs: masked
// AVX-512 kernels of every row count, and heads of whole 32-column tiles
// (B operands are read in place in full tiles).
func tiledAttn(k *Kernels, hs int) bool {
	return k.simd() && k.impl.masked && k.impl.nr == 32 && hs%32 == 0
}

// FlashTiled says whether flash attention runs head size hs on the tiled
// path on these kernels (the planner's plan.FlashHeadTiled on AVX-512).
func (k *Kernels) FlashTiled(hs int) bool { return tiledAttn(k, hs) }

// attnCheck panics when a buffer is too short for (B, T, C, NH, KV): the
// tiled path writes through raw pointers.
func attnCheck(qkv, out, att []float32, B, T, C, NH, KV int) {
	if NH <= 0 || KV <= 0 || C%NH != 0 || NH%KV != 0 || len(qkv) < B*T*(C+2*KV*(C/NH)) || len(out) < B*T*C || len(att) < B*NH*T*T {
		panic(fmt.Sprintf("ops: attention: buffers qkv %d, out %d, att %d too short for B=%d T=%d C=%d NH=%d KV=%d",
			len(qkv), len(out), len(att), B, T, C, NH, KV))
	}
}

// attnPanels carves a head's packed operands out of one pooled buffer:
// each is T×HS floats in panels of 32 columns.
type attnPanels struct {
	buf  *[]float32
	used int
}

// mark is where the panels carved so far end: reset(mark) hands the
// space after them out again (a head's panels, once the group's are in).
// It is safe whether or not the buffer grew since: earlier panels keep
// the storage they were carved from.
func (ap *attnPanels) mark() int { return ap.used }

func (ap *attnPanels) reset(m int) { ap.used = m }

// next returns the next n floats of the buffer, growing it if needed
// (past the pool's size only for long sequences or wide heads).
func (ap *attnPanels) next(n int) []float32 {
	if len(*ap.buf) < ap.used+n {
		*ap.buf = alignedFloats(max(2*len(*ap.buf), ap.used+4*n))
		ap.used = 0
	}
	ap.used += n
	return (*ap.buf)[ap.used-n : ap.used]
}

// transposed packs the (T,HS) row block x (row stride ld) transposed, as
// the B operand of S = A·xᵀ: ceil(T/32) panels of HS×32 floats; the
// panel of keys [j, j+32) starts at j·HS.
func (g attnGeom) transposed(k *Kernels, ap *attnPanels, x []float32, ld int) []float32 {
	dst := ap.next((g.T + 31) / 32 * 32 * g.HS)
	packBPanels(NT, x, ld, 0, g.HS, 0, g.T, dst, 32, k.impl.pack)
	return dst
}

// rows packs the (T,HS) row block x (row stride ld) as the B operand of
// Y = A·x: HS/32 panels of T×32 floats, row p of the panel of columns
// [j, j+32) at j·T + 32·p. Packed, a k step reads 128 contiguous bytes
// instead of a line of a row 3C floats away from the last.
func (g attnGeom) rows(k *Kernels, ap *attnPanels, x []float32, ld int) []float32 {
	dst := ap.next(g.T * g.HS)
	packBPanels(NN, x, ld, 0, g.T, 0, g.HS, dst, 32, k.impl.pack)
	return dst
}

// groupForwardTiled is headForward on the tiled path for the G query
// heads of group bg: its K (transposed) and V packed once.
func (g attnGeom) groupForwardTiled(k *Kernels, out, att, qkv []float32, bg int) {
	buf := k.bufs.getB()
	defer k.bufs.b.Put(buf)
	ap := attnPanels{buf: buf}
	kk, v := g.kv(qkv, bg)
	kt, vp := g.transposed(k, &ap, kk, g.ld), g.rows(k, &ap, v, g.ld)
	for bh := range g.heads(bg) {
		g.headForwardTiled(k, out, att, qkv, kt, vp, bh)
	}
}

// headForwardTiled is headForward on the tiled path, with the group's
// packed K (kt) and V (vp).
func (g attnGeom) headForwardTiled(k *Kernels, out, att, qkv, kt, vp []float32, bh int) {
	im := k.impl
	T, C, ld, HS := g.T, g.C, g.ld, g.HS
	q, _, _, o, a := g.slices(qkv, out, att, bh)
	for i0 := 0; i0 < T; i0 += im.mr {
		r := min(im.mr, T-i0)
		w := i0 + r // the panel's keys: [0, w)
		kern := im.rowKernels[r]
		for j := 0; j < w; j += 32 { // S = Q·Kᵀ
			kern(HS, &q[i0*ld], ld, &kt[j*HS], 32, &a[i0*T+j], T, min(32, w-j), nil, nil)
		}
		_ = a[(i0+r)*T-1]
		softmaxCausalAVX512(&a[i0*T], T, i0+1, r, g.scale) // row i over keys [0, i]
		for i := i0; i < i0+r; i++ {
			clear(a[i*T+i+1 : i*T+T])
		}
		for j := 0; j < HS; j += 32 { // Y = P·V
			kern(w, &a[i0*T], T, &vp[j*T], 32, &o[i0*C+j], C, 32, nil, nil)
		}
	}
}

// groupBackwardTiled is headBackward on the tiled path for the G query
// heads of group bg (V transposed and K by rows packed once); ds is (T,T)
// scratch for the score gradients. It accumulates into each head's dQ
// and the group's dK, dV if acc, and sets them otherwise (the group's
// first head sets dK and dV, the others add to them).
func (g attnGeom) groupBackwardTiled(k *Kernels, dqkv, ds, dout, qkv, att []float32, bg int, acc bool) {
	buf := k.bufs.getB()
	defer k.bufs.b.Put(buf)
	ap := attnPanels{buf: buf}
	kk, v := g.kv(qkv, bg)
	vt, kp := g.transposed(k, &ap, v, g.ld), g.rows(k, &ap, kk, g.ld)
	mark := ap.mark()
	first := true
	for bh := range g.heads(bg) {
		ap.reset(mark)
		g.headBackwardTiled(k, &ap, dqkv, ds, dout, qkv, att, vt, kp, bh, acc, acc || !first)
		first = false
	}
}

// headBackwardTiled is headBackward on the tiled path, with the group's
// packed V (transposed, vt) and K (rows, kp); its Q and dY are packed
// from ap. dQ is accumulated into if accQ, else set; dK and dV likewise
// with accKV.
func (g attnGeom) headBackwardTiled(k *Kernels, ap *attnPanels, dqkv, ds, dout, qkv, att, vt, kp []float32, bh int, accQ, accKV bool) {
	im := k.impl
	T, C, ld, HS := g.T, g.C, g.ld, g.HS
	q, _, _, dy, a := g.slices(qkv, dout, att, bh)
	dq, dk, dv, _, _ := g.slices(dqkv, dout, att, bh)
	dyp, qp := g.rows(k, ap, dy, C), g.rows(k, ap, q, ld)
	for i0 := 0; i0 < T; i0 += im.mr {
		r := min(im.mr, T-i0)
		w := i0 + r
		kern := im.rowKernels[r]
		for j := 0; j < w; j += 32 { // dP = dY·Vᵀ
			kern(HS, &dy[i0*C], C, &vt[j*HS], 32, &ds[i0*T+j], T, min(32, w-j), nil, nil)
		}
		// dS = P⊙(dP − rowsum(P⊙dP))/√HS, row i over keys [0, i]
		_, _ = ds[(i0+r)*T-1], a[(i0+r)*T-1]
		softmaxGradCausalAVX512(&ds[i0*T], T, &a[i0*T], T, i0+1, r, g.scale)
		for i := i0; i < i0+r; i++ {
			clear(ds[i*T+i+1 : i*T+w])
		}
		for j := 0; j < HS; j += 32 { // dQ (+)= dS·K
			c := &dq[i0*ld+j]
			kern(w, &ds[i0*T], T, &kp[j*T], 32, c, ld, 32, srcIf(accQ, c), nil)
		}
	}
	for j0 := 0; j0 < T; j0 += im.mr { // key rows [j0, j0+r), reached by queries [j0, T)
		r := min(im.mr, T-j0)
		kern := im.kernels[r]
		for j := 0; j < HS; j += 32 {
			c := &dv[j0*ld+j] // dV (+)= Pᵀ·dY
			kern(T-j0, &a[j0*T+j0], T, &dyp[j*T+j0*32], 32, c, ld, 32, srcIf(accKV, c), nil)
			c = &dk[j0*ld+j] // dK (+)= dSᵀ·Q
			kern(T-j0, &ds[j0*T+j0], T, &qp[j*T+j0*32], 32, c, ld, 32, srcIf(accKV, c), nil)
		}
	}
}

// srcIf is c when acc (the kernel accumulates into C), nil otherwise.
func srcIf(acc bool, c *float32) *float32 {
	if acc {
		return c
	}
	return nil
}
