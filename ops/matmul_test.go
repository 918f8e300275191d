package ops

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// testImpls returns every micro-kernel family this CPU runs, generic
// always included, each with its real blocking and with a tiny one that
// puts many block edges (kc, mc, nc) inside small matrices; masked ones
// also with in-place operands never and always used. All use every thread
// they are given, however small the product.
func testImpls() []*gemmImpl {
	var out []*gemmImpl
	for _, g := range append(archImpls(), genericImpl()) {
		g.minFlops = 0
		tiny := *g
		tiny.name += "/tiny"
		tiny.kc, tiny.mc, tiny.nc = 5, 2*g.mr, 2*g.nr
		if g.kcRows > 0 {
			tiny.kcRows = 7
		}
		out = append(out, g, &tiny)
		if g.masked {
			packed, tinyPacked, direct := *g, tiny, *g
			never, always := directRule{-1, -1, -1, -1}, directRule{1 << 30, 1 << 30, 1 << 30, 1 << 30}
			packed.name, packed.direct = g.name+"/packed", never
			tinyPacked.name, tinyPacked.direct = g.name+"/tiny-packed", never
			direct.name, direct.direct = g.name+"/direct", always
			out = append(out, &packed, &tinyPacked, &direct)
		}
	}
	return out
}

func newTestKernels(g *gemmImpl, threads int) *Kernels {
	return &Kernels{threads: threads, impl: g, bufs: newGemmBuffers(g)}
}

// operands returns A and B stored for layout l with strides lda, ldb and
// values in [-1, 1).
func operands(r *rand.Rand, l Layout, m, n, k, pad int) (a []float32, lda int, b []float32, ldb int) {
	ar, ac, br, bc := m, k, k, n
	if l == NT {
		br, bc = n, k
	}
	if l == TN {
		ar, ac = k, m
	}
	lda, ldb = ac+pad, bc+pad
	a = randSlice(r, max(ar*lda, 1))
	b = randSlice(r, max(br*ldb, 1))
	return a, lda, b, ldb
}

func randSlice(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = 2*r.Float32() - 1
	}
	return s
}

// absBound returns Σ_p |op(A)[i,p]·op(B)[p,j]|, which scales the rounding
// error any summation order may make.
func absBound(l Layout, i, j, k int, a []float32, lda int, b []float32, ldb int) float64 {
	var s float64
	for p := 0; p < k; p++ {
		av, bv := opElems(l, i, j, p, a, lda, b, ldb)
		s += math.Abs(float64(av) * float64(bv))
	}
	return s
}

type mmShape struct{ m, n, k int }

var mmShapes = []mmShape{
	{0, 5, 3}, {5, 0, 3}, {4, 6, 0}, {1, 1, 1}, {1, 7, 1}, {7, 1, 9}, {1, 1, 300},
	{3, 5, 2}, {12, 32, 1}, {12, 32, 16}, {13, 33, 7}, {11, 31, 17}, {6, 16, 4},
	{24, 64, 257}, {25, 70, 40}, {37, 100, 129}, {50, 9, 31}, {200, 45, 20},
}

// TestMatMul holds every micro-kernel × layout × shape × stride ×
// accumulate × thread count to matmulRef, within the fp32 rounding bound
// 2·k·ε·Σ|a·b| (both sides may err by k·ε·Σ|a·b|).
func TestMatMul(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, g := range testImpls() {
		for _, threads := range []int{1, 3} {
			k := newTestKernels(g, threads) // reused: pooled buffers hold stale panels
			for _, l := range []Layout{NN, NT, TN} {
				for _, s := range mmShapes {
					for _, pad := range []int{0, 3} {
						for _, acc := range []bool{false, true} {
							name := fmt.Sprintf("%s/%v/%dx%dx%d/pad%d/t%d/acc=%v", g.name, l, s.m, s.n, s.k, pad, threads, acc)
							checkMatMul(t, name, r, k, l, s, pad, acc)
						}
					}
				}
			}
		}
	}
}

func checkMatMul(t *testing.T, name string, r *rand.Rand, k *Kernels, l Layout, s mmShape, pad int, acc bool) {
	t.Helper()
	a, lda, b, ldb := operands(r, l, s.m, s.n, s.k, pad)
	ldc := s.n + pad
	c := randSlice(r, max(s.m*ldc, 1))
	want := append([]float32(nil), c...)
	if !acc {
		for i := range c {
			c[i] = float32(math.NaN()) // C must not be read
		}
	}
	matmulRef(l, s.m, s.n, s.k, a, lda, b, ldb, want, ldc, acc)
	k.MatMul(l, s.m, s.n, s.k, a, lda, b, ldb, c, ldc, acc)
	const eps = 1.0 / (1 << 24)
	for i := 0; i < s.m; i++ {
		for j := 0; j < s.n; j++ {
			got, w := c[i*ldc+j], want[i*ldc+j]
			tol := 2*float64(s.k)*eps*(absBound(l, i, j, s.k, a, lda, b, ldb)+math.Abs(float64(w))) + 1e-30
			if d := math.Abs(float64(got) - float64(w)); !(d <= tol) {
				t.Fatalf("%s: C[%d,%d] = %g, want %g (|diff| %g > tol %g)", name, i, j, got, w, d, tol)
			}
		}
		for j := s.n; j < ldc && i*ldc+j < len(c); j++ { // padding untouched
			if got, w := c[i*ldc+j], want[i*ldc+j]; got != w && !(acc == false && math.IsNaN(float64(got))) {
				t.Fatalf("%s: padding C[%d,%d] changed to %g", name, i, j, got)
			}
		}
	}
}

// TestMatMulConcurrent runs Single().MatMul from many goroutines at once,
// as attention does per head, sharing one Kernels' buffer pools.
func TestMatMulConcurrent(t *testing.T) {
	for _, g := range append(archImpls(), genericImpl()) {
		k := newTestKernels(g, 3)
		const jobs, m, n, kk = 8, 37, 45, 70
		r := rand.New(rand.NewPCG(3, 4))
		as, bs, cs, want := make([][]float32, jobs), make([][]float32, jobs), make([][]float32, jobs), make([][]float32, jobs)
		for j := range jobs {
			as[j], bs[j] = randSlice(r, m*kk), randSlice(r, kk*n)
			cs[j], want[j] = make([]float32, m*n), make([]float32, m*n)
			k.Single().MatMul(NN, m, n, kk, as[j], kk, bs[j], n, want[j], n, false)
		}
		var wg sync.WaitGroup
		for j := range jobs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 20 {
					k.Single().MatMul(NN, m, n, kk, as[j], kk, bs[j], n, cs[j], n, false)
				}
			}()
		}
		wg.Wait()
		for j := range jobs {
			for i := range cs[j] {
				if cs[j][i] != want[j][i] {
					t.Fatalf("%s: job %d: C[%d] = %g, want %g (same kernel alone)", g.name, j, i, cs[j][i], want[j][i])
				}
			}
		}
	}
}

// TestMatMulPanicsOnShortSlices checks the guard that keeps the raw-pointer
// kernels inside the caller's slices.
func TestMatMulPanicsOnShortSlices(t *testing.T) {
	k, err := New(Config{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		a, b, c int
		lda     int
	}{
		{"short a", 5, 6, 6, 2},
		{"short b", 6, 5, 6, 2},
		{"short c", 6, 6, 5, 2},
		{"lda < k", 6, 6, 6, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			// (3,2)·(2,3) NN with lda=tc.lda.
			k.MatMul(NN, 3, 3, 2, make([]float32, tc.a), tc.lda, make([]float32, tc.b), 3, make([]float32, tc.c+3), 3, false)
		})
	}
}

// TestISASelection checks New's choice of micro-kernel: auto takes the best
// the CPU runs, TRELLIS_KERNELS=generic forces the fallback, a named ISA the
// CPU lacks is an error, and so is a name nobody knows.
func TestISASelection(t *testing.T) {
	has := map[string]bool{"generic": true}
	best := "generic"
	for i, g := range archImpls() {
		has[g.name] = true
		if i == 0 {
			best = g.name
		}
	}
	cases := []struct {
		isa, env string
		want     string // "" means an error
	}{
		{"", "", best},
		{"auto", "", best},
		{"auto", "generic", "generic"},
		{"", "generic", "generic"},
		{"generic", "", "generic"},
		{"avx2", "generic", "avx2"}, // an explicit ISA beats the environment
		{"avx512", "", "avx512"},
		{"avx2", "", "avx2"},
		{"sse9", "", ""},
		{"auto", "bogus", ""},
	}
	for _, tc := range cases {
		t.Run(tc.isa+"/"+tc.env, func(t *testing.T) {
			t.Setenv("TRELLIS_KERNELS", tc.env)
			want := tc.want
			if want != "" && !has[want] {
				want = "" // this CPU lacks it: New must say so
			}
			k, err := New(Config{Threads: 1, ISA: tc.isa})
			switch {
			case want == "" && err == nil:
				t.Fatalf("New(isa=%q) with TRELLIS_KERNELS=%q = %s, want an error", tc.isa, tc.env, k.ISA())
			case want != "" && err != nil:
				t.Fatalf("New(isa=%q): %v", tc.isa, err)
			case want != "" && k.ISA() != want:
				t.Fatalf("New(isa=%q) with TRELLIS_KERNELS=%q = %s, want %s", tc.isa, tc.env, k.ISA(), want)
			}
		})
	}
	if _, err := New(Config{Threads: -1}); err == nil {
		t.Fatal("New(threads=-1) succeeded")
	}
}

// TestPeakGFLOPS checks that every ISA's FMA loop runs and reports a rate,
// and that an ISA the CPU lacks reports 0.
func TestPeakGFLOPS(t *testing.T) {
	for _, isa := range []string{"auto", "generic", "avx512", "avx2"} {
		_, err := resolveISA(isa)
		got := PeakGFLOPS(isa, 1, 5*time.Millisecond)
		if (err == nil) != (got > 0) {
			t.Errorf("PeakGFLOPS(%q) = %g, resolveISA error %v", isa, got, err)
		}
	}
}

// TestMatMulThreadInvariant checks that the thread count changes no bit of
// C: goroutines split rows or column panels, never a sum over K.
func TestMatMulThreadInvariant(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, g := range testImpls() {
		for _, l := range []Layout{NN, NT, TN} {
			for _, s := range []mmShape{{200, 45, 300}, {37, 100, 129}, {61, 333, 70}} {
				a, lda, b, ldb := operands(r, l, s.m, s.n, s.k, 1)
				c1, c3 := make([]float32, s.m*s.n), make([]float32, s.m*s.n)
				newTestKernels(g, 1).MatMul(l, s.m, s.n, s.k, a, lda, b, ldb, c1, s.n, false)
				newTestKernels(g, 3).MatMul(l, s.m, s.n, s.k, a, lda, b, ldb, c3, s.n, false)
				for i := range c1 {
					if math.Float32bits(c1[i]) != math.Float32bits(c3[i]) {
						t.Fatalf("%s/%v/%v: C[%d] = %g with 1 thread, %g with 3", g.name, l, s, i, c1[i], c3[i])
					}
				}
			}
		}
	}
}
