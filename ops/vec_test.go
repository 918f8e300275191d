package ops

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The AVX-512 bodies must agree with the pure-Go paths for every length
// (empty, shorter than a vector, ragged tails). The whole-row kernels have
// their own tests: TestSoftmaxRowVector, TestLayerNormRowsKernels.
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
		x, y, z := randn(r, n, 2), randn(r, n, 1), randn(r, n, 1)
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
			"axpy":         run(func(v bool, o []float32) { rowAxpy(v, o, x, -0.5) }),
		}
		for name, c := range cases {
			tol := 2e-6
			if name == "gelu_bwd" || name == "gelu_bwd_set" {
				tol = 3e-5 // 1−tanh² cancels for |x| > 3; both paths err by ~1e-5 there
			}
			close(name, n, c.vec, c.ref, tol)
		}
	}
}
