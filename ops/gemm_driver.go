package ops

// gemm is one MatMul call: the operands and the blocking of its impl.
//
// The driver follows GotoBLAS/BLIS. Loops, outermost first:
//
//	ic: rows of C, mc per goroutine at a time (all of M, usually)
//	pc: kc-deep slices of K; each goroutine packs its mc×kc rows of op(A)
//	    into kc×mr micro-panels (once, reused for every column block)
//	jc: nc-column blocks of C; op(B)'s kc×nc block is packed into kc×nr
//	    micro-panels shared by all goroutines (it stays in L2)
//	ir: the A micro-panels of a goroutine's rows (one stays in L1)
//	jr: the B micro-panels of the block, streamed from L2
//
// Packing reads A and B in any Layout and stride, so one micro-kernel
// serves NN, NT and TN. Operands the micro-kernels can read in place (A
// by rows or rows of Aᵀ; rows of B for NN and TN) are not packed when they
// would be reused too little to repay it. The goroutines split the rows of
// C when there are enough, otherwise the B micro-panels (each then packs
// all of the few rows of A). Edges: kernels with fewer rows and lane masks
// where the impl has them, otherwise a scratch tile added to (or copied
// into) C; C outside the (M,N) block is never read, nor C inside it
// unless it is src. The epilogue (src, bias) applies to the first slice of
// K; later slices accumulate into C.
type gemm struct {
	impl    *gemmImpl
	bufs    *gemmBuffers
	threads int
	l       Layout
	m, n, k int
	a       []float32
	lda     int
	b       []float32
	ldb     int
	c       []float32
	ldc     int
	src     []float32 // (M,N) with stride ldc, added once; C itself to accumulate; or nil
	bias    []float32 // (N) added once, or nil
	// aDirect and bDirect say that A and op(B) (NN, TN) are read in place
	// instead of packed.
	aDirect, bDirect bool
	// h, if not nil, holds 16-bit A and B in place of a and b: always
	// packed, into fp32 or bf16 pairs (gemm_half.go).
	h *halfOperands
}

// pass is one (ic, pc, jc) step of the loops: rows [ic, ic+mcb), depth
// [pc, pc+kc), columns [jc, jc+nc), with B packed in bp (unless direct).
type pass struct {
	ic, mcb, pc, kc, jc, nc int
	splitM                  bool
	bp                      []float32
}

func (g *gemm) run() {
	im := g.impl
	t := g.threads
	switch g.l {
	case TN:
		g.aDirect = im.masked && g.n <= im.direct.aTN
	default:
		g.aDirect = im.rowKernels != nil && g.n <= im.direct.a
	}
	g.bDirect = im.masked && g.l != NT && (g.m <= im.direct.bM || g.k*g.n <= im.direct.bSize)
	if g.h != nil {
		g.aDirect, g.bDirect = false, false
	}
	var bp []float32
	if !g.bDirect {
		buf := g.bufs.getB()
		defer g.bufs.b.Put(buf)
		bp = *buf
	}
	var local [8]*gemmScratch
	scratch := local[:0]
	for range t {
		scratch = append(scratch, g.bufs.getScratch())
	}
	// One deferred release, not one defer per thread: a defer in a loop
	// is a heap allocation per GEMM call.
	defer func() {
		for _, s := range scratch {
			g.bufs.scratch.Put(s)
		}
	}()
	mp := (g.m + im.mr - 1) / im.mr
	splitM := t > 1 && mp >= 2*t
	step := im.mc // rows of C per pass of the ic loop
	if splitM {
		step *= t
	}
	kc := im.kc
	if g.aDirect && g.l != TN && im.kcRows > 0 {
		kc = im.kcRows
	}
	for ic := 0; ic < g.m; ic += step {
		for pc := 0; pc < g.k; pc += kc {
			for jc := 0; jc < g.n; jc += im.nc {
				p := pass{ic: ic, mcb: min(step, g.m-ic), pc: pc, kc: min(kc, g.k-pc),
					jc: jc, nc: min(im.nc, g.n-jc), splitM: splitM, bp: bp}
				if t == 1 { // no goroutines, no closures
					g.packB(p, 0, 1)
					g.work(scratch[0], p, 0, 1)
					continue
				}
				parallel(t, t, func(lo, hi int) { g.packB(p, lo, t) })
				parallel(t, t, func(lo, hi int) { g.work(scratch[lo], p, lo, t) })
			}
		}
	}
}

// packB packs goroutine w's share (of t) of the B micro-panels of pass p.
func (g *gemm) packB(p pass, w, t int) {
	if g.bDirect {
		return
	}
	nr, kd := g.impl.nr, g.depth(p.kc)
	np := (p.nc + nr - 1) / nr
	lo, hi := w*np/t, (w+1)*np/t
	switch {
	case lo >= hi:
	case g.h != nil:
		g.h.packB(g.l, p.pc, p.kc, p.jc+lo*nr, min(p.nc, hi*nr)-lo*nr, p.bp[lo*nr*kd:hi*nr*kd], nr)
	default:
		packBPanels(g.l, g.b, g.ldb, p.pc, p.kc, p.jc+lo*nr, min(p.nc, hi*nr)-lo*nr, p.bp[lo*nr*p.kc:hi*nr*p.kc], nr, g.impl.pack)
	}
}

// work runs goroutine w's share (of t) of pass p: its rows of C when the
// rows are split, otherwise its B micro-panels against all rows. It packs
// its rows of A on the first column block.
func (g *gemm) work(s *gemmScratch, p pass, w, t int) {
	im := g.impl
	np := (p.nc + im.nr - 1) / im.nr
	i0, i1, j0, j1 := p.ic, p.ic+p.mcb, w*np/t, (w+1)*np/t
	if p.splitM {
		mpb := (p.mcb + im.mr - 1) / im.mr
		i0, i1 = p.ic+w*mpb/t*im.mr, min(p.ic+p.mcb, p.ic+(w+1)*mpb/t*im.mr)
		j0, j1 = 0, np
	}
	if p.jc == 0 && !g.aDirect {
		if s.a == nil { // 1 MiB or so: only when A is packed
			s.a = alignedFloats(im.mc * im.kc)
		}
		if g.h != nil {
			g.h.packA(g.l, i0, i1-i0, p.pc, p.kc, s.a, im.mr)
		} else {
			packABlock(g.l, g.a, g.lda, i0, i1-i0, p.pc, p.kc, s.a, im.mr, im.pack)
		}
	}
	g.block(s, p, i0, i1, j0, j1)
}

// block computes C[i0:i1, jc+j0*nr : jc+j1*nr] (+)= A rows × B
// micro-panels [j0, j1) of pass p, clipped to the block's nc columns.
func (g *gemm) block(s *gemmScratch, p pass, i0, i1, j0, j1 int) {
	im := g.impl
	mr, nr, kc := im.mr, im.nr, g.depth(p.kc) // kc: steps of the kernels
	edge := -1                                // an in-place B's last, narrow panel: padded into s.bedge
	if g.bDirect && j1*nr > p.nc && j0 < j1 {
		edge = j1 - 1
		packBPanels(g.l, g.b, g.ldb, p.pc, kc, p.jc+edge*nr, p.nc-edge*nr, s.bedge, nr, im.pack)
	}
	for ir := 0; i0+ir*mr < i1; ir++ {
		rows := min(mr, i1-i0-ir*mr)
		var apan []float32
		sa, kern := g.lda, im.kernels[rows]
		switch {
		case !g.aDirect:
			apan, sa = s.a[ir*mr*kc:], mr
		case g.l == TN: // rows of Aᵀ in place
			apan = g.a[p.pc*g.lda+i0+ir*mr:]
		default: // rows of A in place
			apan, kern = g.a[(i0+ir*mr)*g.lda+p.pc:], im.rowKernels[rows]
		}
		crow := (i0 + ir*mr) * g.ldc
		for j := j0; j < j1; j++ {
			cols := min(nr, p.nc-j*nr)
			var bpan []float32
			sb := nr
			switch {
			case j == edge:
				bpan = s.bedge
			case g.bDirect:
				bpan, sb = g.b[p.pc*g.ldb+p.jc+j*nr:], g.ldb
			default:
				bpan = p.bp[j*nr*kc:]
			}
			ci := crow + p.jc + j*nr
			src, bias := g.epilogue(p, ci, p.jc+j*nr)
			if kern != nil && (cols == nr || im.masked) {
				kern(kc, &apan[0], sa, &bpan[0], sb, &g.c[ci], g.ldc, cols, ptr(src), ptr(bias))
				continue
			}
			// Packed panels are zero-padded: compute the full tile aside.
			im.kernels[mr](kc, &apan[0], sa, &bpan[0], sb, &s.tile[0], nr, nr, nil, nil)
			mergeTile(s.tile, nr, rows, cols, g.c[ci:], g.ldc, src, bias)
		}
	}
}

// depth is the number of packed k steps of a pass of kc: kc, or the
// pairs of k of bf16 pairs.
func (g *gemm) depth(kc int) int {
	if g.h != nil && g.h.pairs {
		return (kc + 1) / 2
	}
	return kc
}

// epilogue returns what the tile at C[ci] (column j of C) adds to its
// product in pass p: src and bias on the first slice of K, C itself after.
func (g *gemm) epilogue(p pass, ci, j int) (src, bias []float32) {
	if p.pc > 0 {
		return g.c[ci:], nil
	}
	if g.src != nil {
		src = g.src[ci:]
	}
	if g.bias != nil {
		bias = g.bias[j:]
	}
	return src, bias
}

// ptr is &s[0], or nil for a nil s.
func ptr(s []float32) *float32 {
	if s == nil {
		return nil
	}
	return &s[0]
}

// mergeTile writes the top-left (rows, cols) of the tile t (row stride tld)
// into c (row stride ldc) through the epilogue: c = t + (src + bias), src
// (row stride ldc, possibly c) and bias skipped when nil.
func mergeTile(t []float32, tld, rows, cols int, c []float32, ldc int, src, bias []float32) {
	for i := 0; i < rows; i++ {
		tv := t[i*tld : i*tld+cols]
		dst := c[i*ldc : i*ldc+cols]
		var s []float32
		if src != nil {
			s = src[i*ldc : i*ldc+cols]
		}
		switch {
		case s != nil && bias != nil:
			for j, v := range tv {
				dst[j] = v + (s[j] + bias[j])
			}
		case s != nil:
			for j, v := range tv {
				dst[j] = v + s[j]
			}
		case bias != nil:
			for j, v := range tv {
				dst[j] = v + bias[j]
			}
		default:
			copy(dst, tv)
		}
	}
}
