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
		lvl := func(v bool) int {
			if v {
				return geluAVX512
			}
			return geluScalar
		}
		cases := map[string]pair{
			"gelu_fwd":     run(func(v bool, o []float32) { geluForwardRange(lvl(v), o, x) }),
			"gelu_bwd":     run(func(v bool, o []float32) { geluBackwardRange(lvl(v), o, x, y, true) }),
			"gelu_bwd_set": run(func(v bool, o []float32) { geluBackwardRange(lvl(v), o, x, y, false) }),
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

// GELU's AVX2 body agrees with the pure-Go path as the AVX-512 one does,
// for every length, and where the CPU has both it gives the AVX-512
// body's bits exactly: the same operations on 8 lanes instead of 16, so a
// run's GELU does not depend on which of the two vector ISAs it had.
func TestGELUAVX2(t *testing.T) {
	if !haveAVX2 {
		t.Skip("no AVX2 and FMA on this CPU")
	}
	r := rand.New(rand.NewPCG(13, 14))
	for _, n := range []int{1, 8, 15, 16, 17, 40, 100, 256, 1000} {
		x, y, z := randn(r, n, 2), randn(r, n, 1), randn(r, n, 1)
		for name, f := range map[string]func(vec int, o []float32){
			"fwd":     func(vec int, o []float32) { geluForwardRange(vec, o, x) },
			"bwd":     func(vec int, o []float32) { geluBackwardRange(vec, o, x, y, true) },
			"bwd_set": func(vec int, o []float32) { geluBackwardRange(vec, o, x, y, false) },
		} {
			out := map[int][]float32{}
			levels := []int{geluScalar, geluAVX2}
			if haveAVX512 {
				levels = append(levels, geluAVX512)
			}
			for _, l := range levels {
				out[l] = append([]float32(nil), z...)
				f(l, out[l])
			}
			tol := 2e-6
			if name != "fwd" {
				tol = 3e-5 // 1−tanh² cancels for |x| > 3 (TestVectorMatchesScalar)
			}
			for i, want := range out[geluScalar] {
				if d := math.Abs(float64(out[geluAVX2][i] - want)); d > tol*max(1, math.Abs(float64(want))) {
					t.Fatalf("%s n=%d: element %d: AVX2 %v, scalar %v", name, n, i, out[geluAVX2][i], want)
				}
			}
			if haveAVX512 {
				for i, want := range out[geluAVX512] {
					if math.Float32bits(out[geluAVX2][i]) != math.Float32bits(want) {
						t.Fatalf("%s n=%d: element %d: AVX2 %v, AVX-512 %v: not the same bits", name, n, i, out[geluAVX2][i], want)
					}
				}
			}
		}
	}
}
