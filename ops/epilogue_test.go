package ops

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestMatMulEpilogue holds matMulEp, every micro-kernel × layout × shape ×
// thread count × epilogue, bit for bit to what it stands for: C set to
// src + bias (src: none, C itself, or another matrix; bias: none or a
// vector), then MatMul accumulating the product. C's padding must stay
// untouched, and C unread unless it is src.
func TestMatMulEpilogue(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	shapes := []mmShape{{1, 1, 1}, {4, 6, 0}, {13, 33, 7}, {25, 70, 40}, {37, 100, 129}, {200, 45, 20}}
	for _, g := range testImpls() {
		for _, threads := range []int{1, 3} {
			k := newTestKernels(g, threads)
			for _, l := range []Layout{NN, NT, TN} {
				for _, s := range shapes {
					for _, src := range []string{"none", "c", "other"} {
						for _, bias := range []bool{false, true} {
							name := fmt.Sprintf("%s/t%d/%v/%dx%dx%d/src=%s/bias=%v", g.name, threads, l, s.m, s.n, s.k, src, bias)
							checkEpilogue(t, name, r, k, l, s, src, bias)
						}
					}
				}
			}
		}
	}
}

func checkEpilogue(t *testing.T, name string, r *rand.Rand, k *Kernels, l Layout, s mmShape, srcKind string, withBias bool) {
	t.Helper()
	const pad = 2
	a, lda, b, ldb := operands(r, l, s.m, s.n, s.k, pad)
	ldc := s.n + pad
	c := randSlice(r, max(s.m*ldc, 1))
	want := append([]float32(nil), c...)
	var src, bias []float32
	switch srcKind {
	case "c":
		src = c
	case "other":
		src = randSlice(r, max(s.m*ldc, 1))
	}
	if withBias {
		bias = randSlice(r, max(s.n, 1))
	}
	for i := 0; i < s.m; i++ { // the reference: want = src + bias, then accumulate
		for j := 0; j < s.n; j++ {
			var e float32
			switch {
			case src != nil && bias != nil:
				e = src[i*ldc+j] + bias[j]
			case src != nil:
				e = src[i*ldc+j]
			case bias != nil:
				e = bias[j]
			}
			want[i*ldc+j] = e
		}
	}
	k.MatMul(l, s.m, s.n, s.k, a, lda, b, ldb, want, ldc, true)
	if srcKind != "c" {
		for i := 0; i < s.m; i++ {
			for j := 0; j < s.n; j++ {
				c[i*ldc+j] = float32(math.NaN()) // C must not be read
			}
		}
	}
	k.matMulEp(l, s.m, s.n, s.k, a, lda, b, ldb, c, ldc, src, bias)
	for i := range c {
		if math.Float32bits(c[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: C[%d,%d] = %g, want %g", name, i/ldc, i%ldc, c[i], want[i])
		}
	}
}
