package ops

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestLayerNormRowsKernels holds the whole-block AVX-512 LayerNorm kernels
// to the pure-Go rows, within rounding, for every tail length.
func TestLayerNormRowsKernels(t *testing.T) {
	if !haveAVX512 {
		t.Skip("no AVX-512")
	}
	r := rand.New(rand.NewPCG(5, 8))
	const N = 5
	for _, C := range []int{1, 15, 16, 17, 70, 256} {
		x, w, b, dy := randn(r, N*C, 2), randn(r, C, 1), randn(r, C, 1), randn(r, N*C, 1)
		x[0] += 3 // a row with a large mean
		type res struct{ out, mean, rstd, dx, dw, db []float32 }
		run := func(rows bool) res {
			z := res{make([]float32, N*C), make([]float32, N), make([]float32, N), randn(rand.New(rand.NewPCG(1, 1)), N*C, 1), make([]float32, C), make([]float32, C)}
			for n := 0; n < N; n++ {
				if rows {
					lnFwdRowsAVX512(&z.out[n*C], &x[n*C], &w[0], &b[0], &z.mean[n], &z.rstd[n], C, 1)
					continue
				}
				xr := x[n*C : n*C+C]
				m := rowSum(xr) / float32(C)
				s := float32(1 / math.Sqrt(float64(rowSqDev(xr, m)/float32(C))+LayerNormEps))
				lnOutRow(z.out[n*C:n*C+C], xr, w, b, m, s)
				z.mean[n], z.rstd[n] = m, s
			}
			if rows {
				lnBwdRowsAVX512(&z.dx[0], &dy[0], &x[0], &w[0], &z.mean[0], &z.rstd[0], &z.dw[0], &z.db[0], C, N)
				return z
			}
			for n := 0; n < N; n++ {
				d, xr := dy[n*C:n*C+C], x[n*C:n*C+C]
				g, gx := lnBwdSumsRow(d, xr, w, z.mean[n], z.rstd[n])
				lnBwdDxRow(z.dx[n*C:n*C+C], d, xr, w, z.mean[n], z.rstd[n], g/float32(C), gx/float32(C))
				lnBwdParamsRow(z.dw, z.db, d, xr, z.mean[n], z.rstd[n])
			}
			return z
		}
		got, goRef := run(true), run(false)
		fields := func(z res) [][]float32 { return [][]float32{z.out, z.mean, z.rstd, z.dx, z.dw, z.db} }
		for i, f := range fields(got) {
			name := fmt.Sprintf("C=%d field %d", C, i)
			for j := range f {
				want := fields(goRef)[i][j]
				if d := math.Abs(float64(f[j] - want)); d > 1e-5*(1+math.Abs(float64(want))) {
					t.Fatalf("%s[%d]: rows kernel %g, Go %g", name, j, f[j], want)
				}
			}
		}
	}
}
