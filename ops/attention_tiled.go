package ops

import "fmt"

// The tiled causal path of AttentionForward and AttentionBackward: the
// AVX-512 micro-kernels driven directly over one head's whole (T,T)
// products, 12 query (or key) rows at a time, each row panel stopping at
// the diagonal: query rows [i0, i0+r) need keys [0, i0+r) only, and key
// rows [j0, j0+r) are reached only by queries [j0, T). So the products do
// about half of the (T,T) work, each with a long inner dimension, and
// every operand but Kᵀ and Vᵀ is read in place through its strides. The
// softmax of a row panel runs while its scores are in L1.

// tiledAttn says whether the tiled path runs for head size hs: masked
// AVX-512 kernels of every row count, and heads of whole 32-column tiles
// (B operands are read in place in full tiles).
func tiledAttn(k *Kernels, hs int) bool {
	return k.simd() && k.impl.masked && k.impl.nr == 32 && hs%32 == 0
}

// attnCheck panics when a buffer is too short for (B, T, C, NH): the
// tiled path writes through raw pointers.
func attnCheck(qkv, out, att []float32, B, T, C, NH int) {
	if C%NH != 0 || len(qkv) < B*T*3*C || len(out) < B*T*C || len(att) < B*NH*T*T {
		panic(fmt.Sprintf("ops: attention: buffers qkv %d, out %d, att %d too short for B=%d T=%d C=%d NH=%d",
			len(qkv), len(out), len(att), B, T, C, NH))
	}
}

// packedT packs the (T,HS) row block x (row stride ld) transposed, as the
// B operand of S = A·xᵀ: ceil(T/32) panels of HS×32 floats.
func (g attnGeom) packedT(k *Kernels, x []float32, ld int, buf *[]float32) []float32 {
	n := (g.T + 31) / 32 * 32 * g.HS
	if len(*buf) < n {
		*buf = alignedFloats(n)
	}
	packBPanels(NT, x, ld, 0, g.HS, 0, g.T, *buf, 32, k.impl.pack)
	return (*buf)[:n]
}

// headForwardTiled is headForward on the tiled path.
func (g attnGeom) headForwardTiled(k *Kernels, out, att, qkv []float32, bh int) {
	im := k.impl
	T, C, C3, HS := g.T, g.C, 3*g.C, g.HS
	q, kk, v, o, a := g.slices(qkv, out, att, bh)
	buf := k.bufs.getB()
	defer k.bufs.b.Put(buf)
	kt := g.packedT(k, kk, C3, buf)
	for i0 := 0; i0 < T; i0 += im.mr {
		r := min(im.mr, T-i0)
		w := i0 + r // the panel's keys: [0, w)
		kern := im.rowKernels[r]
		for j := 0; j < w; j += 32 { // S = Q·Kᵀ
			kern(HS, &q[i0*C3], C3, &kt[j*HS], 32, &a[i0*T+j], T, min(32, w-j), nil, nil)
		}
		for i := i0; i < i0+r; i++ {
			row := a[i*T : i*T+T]
			softmaxRowStats(true, row[:i+1], row[:i+1], g.scale)
			clear(row[i+1:])
		}
		for j := 0; j < HS; j += 32 { // Y = P·V
			kern(w, &a[i0*T], T, &v[j], C3, &o[i0*C+j], C, 32, nil, nil)
		}
	}
}

// headBackwardTiled is headBackward on the tiled path; ds is (T,T)
// scratch for the score gradients. It accumulates into the head's dQ, dK,
// dV if acc, and sets them otherwise (each is one product: one kernel
// call per tile).
func (g attnGeom) headBackwardTiled(k *Kernels, dqkv, ds, dout, qkv, att []float32, bh int, acc bool) {
	im := k.impl
	T, C, C3, HS := g.T, g.C, 3*g.C, g.HS
	q, kk, v, dy, a := g.slices(qkv, dout, att, bh)
	dq, dk, dv, _, _ := g.slices(dqkv, dout, att, bh)
	buf := k.bufs.getB()
	defer k.bufs.b.Put(buf)
	vt := g.packedT(k, v, C3, buf)
	for i0 := 0; i0 < T; i0 += im.mr {
		r := min(im.mr, T-i0)
		w := i0 + r
		kern := im.rowKernels[r]
		for j := 0; j < w; j += 32 { // dP = dY·Vᵀ
			kern(HS, &dy[i0*C], C, &vt[j*HS], 32, &ds[i0*T+j], T, min(32, w-j), nil, nil)
		}
		for i := i0; i < i0+r; i++ { // dS = P⊙(dP − rowsum(P⊙dP))/√HS
			d := ds[i*T : i*T+w]
			softmaxGradRow(true, d[:i+1], a[i*T:i*T+i+1], g.scale)
			clear(d[i+1:])
		}
		for j := 0; j < HS; j += 32 { // dQ (+)= dS·K
			c := &dq[i0*C3+j]
			kern(w, &ds[i0*T], T, &kk[j], C3, c, C3, 32, srcIf(acc, c), nil)
		}
	}
	for j0 := 0; j0 < T; j0 += im.mr { // key rows [j0, j0+r), reached by queries [j0, T)
		r := min(im.mr, T-j0)
		kern := im.kernels[r]
		for j := 0; j < HS; j += 32 {
			c := &dv[j0*C3+j] // dV (+)= Pᵀ·dY
			kern(T-j0, &a[j0*T+j0], T, &dy[j0*C+j], C, c, C3, 32, srcIf(acc, c), nil)
			c = &dk[j0*C3+j] // dK (+)= dSᵀ·Q
			kern(T-j0, &ds[j0*T+j0], T, &q[j0*C3+j], C3, c, C3, 32, srcIf(acc, c), nil)
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
