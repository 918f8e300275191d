package ops

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The AVX-512 bodies must agree with the pure-Go paths for every length
// (empty, shorter than a vector, ragged tails).
func TestVectorMatchesScalar(t *testing.T) {
	if !haveAVX512 {
		t.Skip("no AVX-512 on this CPU")
	}
	r := rand.New(rand.NewPCG(11, 12))
	close := func(name string, n int, got, want []float32, tol float64) {
		t.Helper()
		for i := range want {
			if d := math.Abs(float64(got[i] - want[i])); d > tol*max(1, math.Abs(float64(want[i]))) || math.IsNaN(float64(got[i])) {
				t.Errorf("%s n=%d: element %d: vector %v, scalar %v", name, n, i, got[i], want[i])
				return
			}
		}
	}
	for _, n := range []int{1, 15, 16, 17, 33, 100, 256} {
		x, y, z, w := randn(r, n, 2), randn(r, n, 1), randn(r, n, 1), randn(r, n, 1)
		type pair struct{ vec, ref []float32 }
		run := func(f func(v bool, out []float32)) pair {
			a, b := make([]float32, n), make([]float32, n)
			for i := range a {
				a[i], b[i] = z[i], z[i]
			}
			f(true, a)
			f(false, b)
			return pair{a, b}
		}
		cases := map[string]pair{
			"gelu_fwd":     run(func(v bool, o []float32) { geluForwardRange(v, o, x) }),
			"gelu_bwd":     run(func(v bool, o []float32) { geluBackwardRange(v, o, x, y, true) }),
			"gelu_bwd_set": run(func(v bool, o []float32) { geluBackwardRange(v, o, x, y, false) }),
			"exp":          run(func(v bool, o []float32) { o[0] = rowExp(v, o, x, 0.7, 0.3) / float32(n) }),
			"scale":        run(func(v bool, o []float32) { rowScale(v, o, 1.5) }),
			"axpy":         run(func(v bool, o []float32) { rowAxpy(v, o, x, -0.5) }),
			"softmaxgrad":  run(func(v bool, o []float32) { rowSoftmaxGrad(v, o, x, 0.25, 0.125) }),
			"lnout":        run(func(v bool, o []float32) { lnOutRow(v, o, x, y, w, 0.1, 1.3) }),
			"lnbwd_dx":     run(func(v bool, o []float32) { lnBwdDxRow(v, o, y, x, w, 0.1, 1.3, 0.2, -0.4) }),
		}
		for name, c := range cases {
			tol := 2e-6
			if name == "gelu_bwd" || name == "gelu_bwd_set" {
				tol = 3e-5 // 1−tanh² cancels for |x| > 3; both paths err by ~1e-5 there
			}
			close(name, n, c.vec, c.ref, tol)
		}
		dw1, db1, dw2, db2 := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
		lnBwdParamsRow(true, dw1, db1, y, x, 0.1, 1.3)
		lnBwdParamsRow(false, dw2, db2, y, x, 0.1, 1.3)
		close("lnbwd_dw", n, dw1, dw2, 1e-6)
		close("lnbwd_db", n, db1, db2, 1e-6)
		red := map[string][2]float32{
			"max":   {rowMax(true, x), rowMax(false, x)},
			"sum":   {rowSum(true, x), rowSum(false, x)},
			"sqdev": {rowSqDev(true, x, 0.3), rowSqDev(false, x, 0.3)},
			"dot":   {rowDot(true, x, y), rowDot(false, x, y)},
		}
		g1, gx1 := lnBwdSumsRow(true, y, x, w, 0.1, 1.3)
		g2, gx2 := lnBwdSumsRow(false, y, x, w, 0.1, 1.3)
		red["lnsums_g"], red["lnsums_gx"] = [2]float32{g1, g2}, [2]float32{gx1, gx2}
		for name, p := range red {
			close(name, n, p[:1], p[1:], 1e-5*math.Sqrt(float64(n)))
		}
	}
}
