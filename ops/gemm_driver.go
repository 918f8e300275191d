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
// serves NN, NT and TN. The goroutines split the rows of C when there are
// enough, otherwise the B micro-panels (each then packs all of the few rows
// of A). Edge tiles are computed into a scratch tile and added to (or copied
// into) C, so C outside the (M,N) block, and C when accumulate is false, is
// never read.
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
}

func (g *gemm) run(accumulate bool) {
	im := g.impl
	t := g.threads
	bp := g.bufs.getB()
	defer g.bufs.b.Put(bp)
	scratch := make([]*gemmScratch, t)
	for w := range scratch {
		scratch[w] = g.bufs.getScratch()
		defer g.bufs.scratch.Put(scratch[w])
	}
	mp := (g.m + im.mr - 1) / im.mr
	splitM := t > 1 && mp >= 2*t
	step := im.mc // rows of C per pass of the ic loop
	if splitM {
		step *= t
	}
	for ic := 0; ic < g.m; ic += step {
		mcb := min(step, g.m-ic)
		for pc := 0; pc < g.k; pc += im.kc {
			kc := min(im.kc, g.k-pc)
			acc := accumulate || pc > 0
			for jc := 0; jc < g.n; jc += im.nc {
				nc := min(im.nc, g.n-jc)
				g.packBBlock(*bp, jc, nc, pc, kc)
				np := (nc + im.nr - 1) / im.nr
				parallel(t, t, func(lo, hi int) {
					for w := lo; w < hi; w++ {
						i0, i1, j0, j1 := ic, ic+mcb, w*np/t, (w+1)*np/t
						if splitM {
							mpb := (mcb + im.mr - 1) / im.mr
							i0, i1 = ic+w*mpb/t*im.mr, min(ic+mcb, ic+(w+1)*mpb/t*im.mr)
							j0, j1 = 0, np
						}
						s := scratch[w]
						if jc == 0 {
							packABlock(g.l, g.a, g.lda, i0, i1-i0, pc, kc, s.a, im.mr, im.pack)
						}
						g.block(s, *bp, i0, i1, j0, j1, jc, nc, kc, acc)
					}
				})
			}
		}
	}
}

// packBBlock packs op(B)[pc:pc+kc, jc:jc+nc] into micro-panels, the
// goroutines splitting the panels between them.
func (g *gemm) packBBlock(dst []float32, jc, nc, pc, kc int) {
	nr := g.impl.nr
	np := (nc + nr - 1) / nr
	parallel(g.threads, np, func(lo, hi int) {
		packBPanels(g.l, g.b, g.ldb, pc, kc, jc+lo*nr, min(nc, hi*nr)-lo*nr, dst[lo*nr*kc:hi*nr*kc], nr, g.impl.pack)
	})
}

// block computes C[i0:i1, jc+j0*nr : jc+j1*nr] (+)= packed A rows ×
// packed B micro-panels [j0, j1), clipped to the nc columns of the block.
func (g *gemm) block(s *gemmScratch, bp []float32, i0, i1, j0, j1, jc, nc, kc int, acc bool) {
	im := g.impl
	mr, nr := im.mr, im.nr
	for ir := 0; i0+ir*mr < i1; ir++ {
		apan := s.a[ir*mr*kc : (ir+1)*mr*kc]
		rows := min(mr, i1-i0-ir*mr)
		crow := (i0 + ir*mr) * g.ldc
		for j := j0; j < j1; j++ {
			bpan := bp[j*nr*kc : (j+1)*nr*kc]
			cols := min(nr, nc-j*nr)
			ci := crow + jc + j*nr
			if rows == mr && cols == nr {
				im.kernel(kc, &apan[0], &bpan[0], &g.c[ci], g.ldc, acc)
				continue
			}
			im.kernel(kc, &apan[0], &bpan[0], &s.tile[0], nr, false)
			mergeTile(s.tile, nr, rows, cols, g.c[ci:], g.ldc, acc)
		}
	}
}

// mergeTile writes the top-left (rows, cols) of the tile t (row stride tld)
// into c (row stride ldc): c += t when acc, c = t otherwise.
func mergeTile(t []float32, tld, rows, cols int, c []float32, ldc int, acc bool) {
	for i := 0; i < rows; i++ {
		src := t[i*tld : i*tld+cols]
		dst := c[i*ldc : i*ldc+cols]
		if acc {
			for j, v := range src {
				dst[j] += v
			}
		} else {
			copy(dst, src)
		}
	}
}
