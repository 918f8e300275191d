package ops

// The block products of FlashAttention (attention_flash.go). On the tiled
// path (see tiledAttn) they drive the AVX-512 micro-kernels over the
// head's operands packed once into 32-column panels, as the tiled
// materialising kernel does; otherwise they are single-threaded MatMul
// calls on the strided slices.

// flashHead is one head's worker state: the kernels, the geometry, and
// its pooled panels and scratch.
type flashHead struct {
	k     *Kernels
	g     attnGeom
	simd  bool // the AVX-512 row kernels
	tiled bool
	// qb, kb: the backward's query and key block sizes (the forward's
	// key block is kb too).
	qb, kb int
	fkb    int // the forward's key block
	// edge: 16-column row kernels for the last panel of a score row when
	// it holds at most 16 keys (nil: the 32-column ones, masked).
	edge []microKernel
	ap   attnPanels
	// Packed operands (tiled only): kt, vt transposed, 32 keys a panel;
	// kp, vp, qp, dyp by rows, 32 channels a panel.
	kt, vt, kp, vp, qp, dyp []float32
}

func newFlashHead(k *Kernels, g attnGeom) *flashHead {
	return &flashHead{k: k, g: g, simd: g.simd, tiled: g.tiled, qb: flashQBlock, kb: flashKBlock, fkb: flashKBlock, edge: edgeKernels16(k.impl), ap: attnPanels{buf: k.bufs.getB()}}
}

// band is the number of query rows whose products run back to back: one
// micro-kernel tile on the tiled path, n rows otherwise.
func (h *flashHead) band(n int) int {
	if h.tiled {
		return h.k.impl.mr
	}
	return n
}

// firstTile is the row count of the first query tile on the tiled path
// when T is not a multiple of the tile, 0 otherwise: the short tile goes
// first, on the queries that see the fewest keys, where its kernels
// (fewer independent sums) cost least; every later tile is whole.
func (h *flashHead) firstTile() int {
	if !h.tiled {
		return 0
	}
	return h.g.T % h.k.impl.mr
}

// release returns the pooled buffer.
func (h *flashHead) release() { h.k.bufs.b.Put(h.ap.buf) }

// qkvo returns the head's Q and its group's K, V (row stride ld) and its
// column block of out (row stride C).
func (g attnGeom) qkvo(qkv, out []float32, bh int) (q, kk, v, o []float32) {
	b, hd := bh/g.NH, bh%g.NH
	kk, v = g.kv(qkv, b*g.KV+hd/g.G)
	return qkv[b*g.T*g.ld+hd*g.HS:], kk, v, out[b*g.T*g.C+hd*g.HS:]
}

// pack packs, on the tiled path, a group's shared operands: K
// (transposed) and V — by rows for the forward (kr nil), transposed for
// the backward, which also takes K by rows (kr).
func (h *flashHead) pack(kk, v, kr []float32) {
	if !h.tiled {
		return
	}
	g, ld := h.g, h.g.ld
	h.kt = g.transposed(h.k, &h.ap, kk, ld)
	if kr == nil {
		h.vp = g.rows(h.k, &h.ap, v, ld)
		return
	}
	h.vt = g.transposed(h.k, &h.ap, v, ld)
	h.kp = g.rows(h.k, &h.ap, kr, ld)
}

// packHead packs, on the tiled path, a head's own backward operands: Q
// and dO by rows.
func (h *flashHead) packHead(q, dy []float32) {
	if !h.tiled {
		return
	}
	h.qp, h.dyp = h.g.rows(h.k, &h.ap, q, h.g.ld), h.g.rows(h.k, &h.ap, dy, h.g.C)
}

// The products below are of query rows [i0, i0+rows) and keys [j0, j0+w)
// of a causal block: on the tiled path each 12-row tile stops at its
// last query's key (entries beyond are left unset or, being zero in P
// and dS, skipped), so the blocks on the diagonal cost their triangle.

// causalWidth is how many of the block's w keys from j0 the queries
// [q, q+r) see.
func causalWidth(q, r, j0, w int) int { return min(w, q+r-j0) }

// abT sets dst[r, j] = A[r]·X[j0+j] for r < rows, j < w (dst row stride
// ldd) where query i0+r sees key j0+j (at least; entries past the
// diagonal may be left unset): A's rows in place
// (stride lda), X the head's (T,HS) K or V slice (row stride ld), xt its
// transposed panels.
func (h *flashHead) abT(dst []float32, ldd int, a []float32, lda, i0, rows int, x, xt []float32, j0, w int) {
	HS := h.g.HS
	if !h.tiled {
		h.k.MatMul(NT, rows, w, HS, a, lda, x[j0*h.g.ld:], h.g.ld, dst, ldd, false)
		return
	}
	im := h.k.impl
	for i := 0; i < rows; i += im.mr {
		r := min(im.mr, rows-i)
		wi := causalWidth(i0+i, r, j0, w)
		for j := 0; j < wi; j += 32 {
			// Rows before query j0+j see none of these keys: a panel
			// crossing the diagonal starts at the first row that does.
			f := i + max(0, j0+j-i0-i)
			rf, n := r-(f-i), min(32, wi-j)
			kj := im.rowKernels[rf]
			if n <= 16 && h.edge != nil {
				kj = h.edge[rf]
			}
			kj(HS, &a[f*lda], lda, &xt[(j0+j)*HS], 32, &dst[f*ldd+j], ldd, n, nil, nil)
		}
	}
}

// ab sets (acc false) or adds to (acc true) C[r, :HS] the product
// Σ_{j<w} P[r, j]·X[j0+j] for r < rows: P in place (row stride ldp), C
// row stride ldc, X the head's (T,HS) K or V slice (row stride ld), xp
// its row panels.
// P is zero where query i0+r does not see key j0+j; with acc false, every
// row sees key j0 (j0 = 0).
func (h *flashHead) ab(c []float32, ldc int, p []float32, ldp, i0, rows, w int, x, xp []float32, j0 int, acc bool) {
	g := h.g
	if !h.tiled {
		h.k.MatMul(NN, rows, g.HS, w, p, ldp, x[j0*g.ld:], g.ld, c, ldc, acc)
		return
	}
	im := h.k.impl
	for i := 0; i < rows; i += im.mr {
		r := min(im.mr, rows-i)
		kern, wi := im.rowKernels[r], causalWidth(i0+i, r, j0, w)
		if wi <= 0 {
			continue
		}
		for j := 0; j < g.HS; j += 32 {
			ci := &c[i*ldc+j]
			kern(wi, &p[i*ldp], ldp, &xp[j*g.T+32*j0], 32, ci, ldc, 32, srcIf(acc, ci), nil)
		}
	}
}

// aTb adds to C[j, :HS] the product Σ_{r<rows} P[r, j]·Y[i0+r] for j < w:
// P in place (row stride ldp, zero where query i0+r does not see key
// j0+j), C row stride ldc, Y the head's (T,HS) Q or dO slice (row stride
// ldy), yp its row panels.
func (h *flashHead) aTb(c []float32, ldc int, p []float32, ldp, j0, w, i0, rows int, y []float32, ldy int, yp []float32) {
	g := h.g
	if !h.tiled {
		h.k.MatMul(TN, w, g.HS, rows, p, ldp, y[i0*ldy:], ldy, c, ldc, true)
		return
	}
	im := h.k.impl
	for j := 0; j < w; j += im.mr {
		kern := im.kernels[min(im.mr, w-j)]
		p0 := max(0, j0+j-i0) // the first query that sees key j0+j
		if p0 >= rows {
			continue
		}
		for cc := 0; cc < g.HS; cc += 32 {
			ci := &c[j*ldc+cc]
			kern(rows-p0, &p[p0*ldp+j], ldp, &yp[cc*g.T+32*(i0+p0)], 32, ci, ldc, 32, ci, nil)
		}
	}
}
