package ops

import (
	"fmt"
	"sync"
	"unsafe"
)

// microKernel computes one tile of at most mr×nr of C:
//
//	C[i][j] = Σ_{p<kc} a[p*sa + i] · b[p*sb + j]  (+ src[i*ldc + j] + bias[j]),  i < rows, j < cols,
//
// with C row-major with row stride ldc; strides are in elements. A is a
// packed micro-panel (sa = mr) or, read in place, rows of Aᵀ (sa = lda); B
// a packed micro-panel (sb = nr) or rows of B (sb = ldb). rows is fixed by
// the kernel (gemmImpl.kernels[rows]); cols < nr only where the impl is
// masked. The epilogue: src (C itself to accumulate, or another tile of
// the same stride) and bias are each added unless nil, src + bias rounded
// first; with src nil C is never read. kc may be 0.
type microKernel func(kc int, a *float32, sa int, b *float32, sb int, c *float32, ldc int, cols int, src, bias *float32)

// gemmImpl is a family of micro-kernels with the cache blocking of the
// driver that feeds it.
type gemmImpl struct {
	name   string
	mr, nr int // largest tile of C
	kc     int // depth of a packed slice of K (an A micro-panel kc×mr stays in L1)
	// kcRows, if not 0, is the depth of a slice of K when A's rows are read
	// in place (NN, NT): fewer passes over C for deep products (a 12-row
	// panel of 512 floats still fits L1 beside B's stream).
	kcRows int
	mc     int // rows of A one goroutine packs at a time; a multiple of mr
	nc     int // columns of a packed B block (kc×nc stays in L2); a multiple of nr
	// kernels[r] computes r rows, r = 1..mr; a nil entry means: pad to mr.
	kernels []microKernel
	// rowKernels[r] are kernels reading A's rows in place: their terms are
	// a[i*sa + p] (sa = lda), for NN and NT without packing A.
	rowKernels []microKernel
	// masked kernels handle cols < nr themselves, and may read operands in
	// place (see direct).
	masked bool
	direct directRule
	pack   packer      // copies A for TN and B for NN, TN; transposes the others
	peak   func(d int) // runs d iterations of an FMA loop of peakFlops flops each
	// peakFlops is the flop count of one iteration of peak.
	peakFlops int
	// minFlops is the work below which MatMul adds no goroutine: one more
	// must get at least this many flops (about 0.1 ms) to pay for waking
	// it, which on a busy machine can take as long as the work.
	minFlops int
}

// maxKC is the deepest slice of K a pass may take.
func (g *gemmImpl) maxKC() int { return max(g.kc, g.kcRows) }

// minFlopsPerThread is gemmImpl.minFlops of the fast kernels.
const minFlopsPerThread = 16 << 20

// directRule says when a masked gemmImpl reads an operand in place rather
// than packing it: packing costs about one copy per element and pays when
// the packed panels are reused often; in place, rows of Aᵀ (TN) read a
// scattered line per k step, while rows of A (NN, NT, through rowKernels)
// and of B (NN, TN) stream. Measured on the shapes of matmul_bench_test.go,
// and for TN on the weight gradients of a training step (K = B·T = 2048
// rows of dout, N <= 1024): in place they ran 2-3% faster in the step (up
// to 8% alone) than with Aᵀ packed, whose copy is one float per 2·N
// flops; at N = 3072 packing wins again (1024×768×3072: 155 against 130
// GFLOP/s).
type directRule struct {
	a     int // A in place (NN, NT) when n <= a
	aTN   int // Aᵀ's rows in place (TN) when n <= aTN
	bM    int // B in place (NN, TN) when m <= bM ...
	bSize int // ... or when B has at most bSize elements
}

// gemmBuffers pools packing buffers of one gemmImpl: packed B blocks (shared
// by a MatMul's goroutines) and per-goroutine scratch (a packed A block and
// an edge tile).
type gemmBuffers struct {
	b       sync.Pool // *[]float32 of len kc*nc
	scratch sync.Pool // *gemmScratch
	impl    *gemmImpl
}

type gemmScratch struct {
	a     []float32 // (mc/mr) packed A panels, each kc×mr; nil until needed
	bedge []float32 // (kc, nr) the padded last panel of an in-place B
	tile  []float32 // (mr, nr) edge tile
}

func newGemmBuffers(g *gemmImpl) *gemmBuffers {
	return &gemmBuffers{impl: g}
}

func (p *gemmBuffers) getB() *[]float32 {
	if v, ok := p.b.Get().(*[]float32); ok {
		return v
	}
	s := alignedFloats(p.impl.maxKC() * p.impl.nc)
	return &s
}

func (p *gemmBuffers) getScratch() *gemmScratch {
	if v, ok := p.scratch.Get().(*gemmScratch); ok {
		return v
	}
	g := p.impl
	return &gemmScratch{bedge: alignedFloats(g.maxKC() * g.nr), tile: alignedFloats(g.mr * g.nr)} // a: on first use
}

// alignedFloats returns a zeroed slice of n float32 starting on a 64-byte
// boundary (one cache line, one zmm).
func alignedFloats(n int) []float32 {
	s := make([]float32, n+16)
	off := int(uintptr(unsafe.Pointer(&s[0]))%64) / 4
	if off != 0 {
		off = 16 - off
	}
	return s[off : off+n : off+n]
}

// matmulCheck panics when the operands are too short for the shapes and
// strides: the micro-kernels write through raw pointers, so this is the
// line that keeps a caller's mistake from corrupting memory. E is the
// element type of A and B (fp32, or the bits of bf16 and fp16).
func matmulCheck[E any](l Layout, m, n, kk int, a []E, lda int, b []E, ldb int, c []float32, ldc int) {
	if m < 0 || n < 0 || kk < 0 {
		panic(fmt.Sprintf("ops: MatMul: negative size m=%d n=%d k=%d", m, n, kk))
	}
	ar, ac, br, bc := m, kk, kk, n // stored shapes of A and B
	switch l {
	case NN:
	case NT:
		br, bc = n, kk
	case TN:
		ar, ac = kk, m
	default:
		panic(fmt.Sprintf("ops: MatMul: unknown %v", l))
	}
	need := func(name string, size, rows, cols, ld int) {
		if rows == 0 || cols == 0 {
			return
		}
		if ld < cols {
			panic(fmt.Sprintf("ops: MatMul %v: ld%s=%d < %d columns", l, name, ld, cols))
		}
		if size < (rows-1)*ld+cols {
			panic(fmt.Sprintf("ops: MatMul %v: len(%s)=%d < %d for (%d,%d) with stride %d", l, name, size, (rows-1)*ld+cols, rows, cols, ld))
		}
	}
	need("a", len(a), ar, ac, lda)
	need("b", len(b), br, bc, ldb)
	need("c", len(c), m, n, ldc)
}

// MatMul computes C = op(A)·op(B) (accumulate false) or C += op(A)·op(B)
// (accumulate true), with C (M,N) row-major with row stride ldc, and A, B
// stored as Layout says with row strides lda, ldb:
//
//	NN: A (M,K) lda>=K, B (K,N) ldb>=N
//	NT: A (M,K) lda>=K, B (N,K) ldb>=K
//	TN: A (K,M) lda>=M, B (K,N) ldb>=N
//
// Strides let callers address one head of a (B,T,3C) QKV tensor without
// copying. With accumulate false C is never read (it may hold NaN). It uses
// up to k.Threads() goroutines and is safe for concurrent use. It panics if
// a slice is too short for its shape and stride.
func (k *Kernels) MatMul(l Layout, m, n, kk int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, accumulate bool) {
	var src []float32
	if accumulate {
		src = c
	}
	k.matMulEp(l, m, n, kk, a, lda, b, ldb, c, ldc, src, nil)
}

// matMulEp is MatMul with an epilogue: C = op(A)·op(B) + src + bias, the
// sum src[i,j] + bias[j] rounded before the product is added (as if C
// had been set to it and the product accumulated). src, nil for none, is
// (M,N) with row stride ldc; it may be C itself (to accumulate) or, in
// full, another matrix; bias (N) may be nil. C is read only when it is
// src.
func (k *Kernels) matMulEp(l Layout, m, n, kk int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, src, bias []float32) {
	matmulCheck(l, m, n, kk, a, lda, b, ldb, c, ldc)
	epilogueCheck(m, n, ldc, src, bias)
	k.start(gemm{impl: k.impl, bufs: k.bufs, l: l, m: m, n: n, k: kk,
		a: a, lda: lda, b: b, ldb: ldb, c: c, ldc: ldc, src: src, bias: bias})
}

// start runs the checked product g on up to k.Threads() goroutines, fewer
// when each would get less than g.impl.minFlops; with a depth of 0 it
// only applies the epilogue.
func (k *Kernels) start(g gemm) {
	if g.m == 0 || g.n == 0 {
		return
	}
	if g.k == 0 {
		for i := 0; i < g.m; i++ {
			var s []float32
			if g.src != nil {
				s = g.src[i*g.ldc : i*g.ldc+g.n]
			}
			epilogueRow(g.c[i*g.ldc:i*g.ldc+g.n], s, g.bias)
		}
		return
	}
	t := k.threads
	if f := g.impl.minFlops; f > 0 && 2*g.m*g.n*g.k/f < t {
		t = max(2*g.m*g.n*g.k/f, 1)
	}
	g.threads = t
	g.run()
}

// epilogueCheck panics when src or bias is too short for C's (m, n) and
// stride ldc.
func epilogueCheck(m, n, ldc int, src, bias []float32) {
	if src != nil && m > 0 && n > 0 && len(src) < (m-1)*ldc+n {
		panic(fmt.Sprintf("ops: MatMul: len(src)=%d < %d for (%d,%d) with stride %d", len(src), (m-1)*ldc+n, m, n, ldc))
	}
	if bias != nil && len(bias) < n {
		panic(fmt.Sprintf("ops: MatMul: len(bias)=%d < n=%d", len(bias), n))
	}
}

// epilogueRow sets c = src + bias, either skipped when nil (c = 0 when
// both are): the product of depth 0. src may be c.
func epilogueRow(c, src, bias []float32) {
	switch {
	case src != nil && bias != nil:
		src, bias = src[:len(c)], bias[:len(c)]
		for j := range c {
			c[j] = src[j] + bias[j]
		}
	case src != nil:
		copy(c, src[:len(c)])
	case bias != nil:
		copy(c, bias[:len(c)])
	default:
		clear(c)
	}
}
