package ops

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// fdVar is one differentiable input of a kernel under test: its values x
// (perturbed in place during the check) and the buffer dx its backward
// accumulates into.
type fdVar struct {
	name  string
	x, dx []float32
}

// gradCase is a kernel under a scalar probe: loss() runs the forward and
// returns Σ out⊙r in float64 for a fixed random r; backward() runs the
// kernel's backward with dout = r, accumulating into each var's dx.
type gradCase struct {
	vars     []fdVar
	loss     func() float64
	backward func()
	eps, tol float64 // defaults 1e-2 and 1e-3
	samples  int     // elements checked per var (0: all)
}

// fdCompare is the shared finite-difference gradient check. It
//
//  1. prefills every dx with a known pattern, runs backward and subtracts
//     the pattern, so a backward that overwrites instead of accumulating
//     fails;
//  2. estimates ∂loss/∂x_i by central differences (loss(x+ε) − loss(x−ε))/2ε,
//     evaluated with the float32 kernels and summed in float64;
//  3. reports, per var, err = max_i |analytic_i − numeric_i| / max_i |numeric_i|
//     and fails it when err > tol, or when the numeric gradient is
//     identically zero (a check that cannot fail proves nothing).
//
// It returns the worst error and one message per failing var.
func fdCompare(c gradCase, seed uint64) (worst float64, problems []string) {
	eps, tol := c.eps, c.tol
	if eps == 0 {
		eps = 1e-2
	}
	if tol == 0 {
		tol = 1e-3
	}
	for _, v := range c.vars {
		for i := range v.dx {
			v.dx[i] = float32(math.Sin(float64(i) + 0.5))
		}
	}
	c.backward()
	r := rand.New(rand.NewPCG(seed, 99))
	for _, v := range c.vars {
		idx := make([]int, len(v.x))
		for i := range idx {
			idx[i] = i
		}
		if c.samples > 0 && c.samples < len(idx) {
			r.Shuffle(len(idx), func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
			idx = idx[:c.samples]
		}
		var maxDiff, maxNum float64
		where := -1
		for _, i := range idx {
			analytic := float64(v.dx[i]) - math.Sin(float64(i)+0.5)
			x0 := v.x[i]
			v.x[i] = x0 + float32(eps)
			lp := c.loss()
			v.x[i] = x0 - float32(eps)
			lm := c.loss()
			v.x[i] = x0
			h := float64(x0+float32(eps)) - float64(x0-float32(eps))
			num := (lp - lm) / h
			maxNum = max(maxNum, math.Abs(num))
			if d := math.Abs(analytic - num); d > maxDiff {
				maxDiff, where = d, i
			}
		}
		if maxNum == 0 {
			problems = append(problems, fmt.Sprintf("%s: numeric gradient is identically zero", v.name))
			continue
		}
		e := maxDiff / maxNum
		worst = max(worst, e)
		if e > tol {
			problems = append(problems, fmt.Sprintf("%s: max |analytic−numeric|/max|numeric| = %.3g > %.3g (worst at element %d)", v.name, e, tol, where))
		}
	}
	return worst, problems
}

// checkGrads runs fdCompare and reports through t.
func checkGrads(t *testing.T, c gradCase) {
	t.Helper()
	worst, problems := fdCompare(c, 1)
	for _, p := range problems {
		t.Error(p)
	}
	t.Logf("worst relative gradient error %.3g", worst)
}

// randn returns n values N(0, std²) from r.
func randn(r *rand.Rand, n int, std float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * std)
	}
	return x
}

// probe returns Σ out⊙w in float64.
func probe(out, w []float32) float64 {
	var s float64
	for i, v := range out {
		s += float64(v) * float64(w[i])
	}
	return s
}

// kernelConfigs are the kernel configurations every test runs under: the
// pure-Go path, the CPU's best ISA on one thread (inline), and on three
// (uneven splits).
var kernelConfigs = []Config{{Threads: 1, ISA: "generic"}, {Threads: 1}, {Threads: 3}}

func configName(c Config) string {
	isa := c.ISA
	if isa == "" {
		isa = "auto"
	}
	return fmt.Sprintf("%s/threads=%d", isa, c.Threads)
}

func newKernels(t testing.TB, threads int) *Kernels {
	t.Helper()
	return newKernelsConfig(t, Config{Threads: threads})
}

func newKernelsConfig(t testing.TB, c Config) *Kernels {
	t.Helper()
	k, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// The checker itself must fail a wrong backward: GELU's backward scaled by
// 1.05, and a residual backward that overwrites instead of accumulating.
func TestGradCheckCatchesWrongBackward(t *testing.T) {
	k := newKernels(t, 1)
	r := rand.New(rand.NewPCG(1, 2))
	n := 20
	x, dx, out, w := randn(r, n, 1.5), make([]float32, n), make([]float32, n), randn(r, n, 1)
	wrongGELU := gradCase{
		vars: []fdVar{{"x", x, dx}},
		loss: func() float64 { GELUForward(k, out, x, n); return probe(out, w) },
		backward: func() {
			tmp := make([]float32, n)
			GELUBackward(k, tmp, x, w, n)
			for i := range dx {
				dx[i] += 1.05 * tmp[i]
			}
		},
	}
	if _, p := fdCompare(wrongGELU, 1); len(p) == 0 {
		t.Error("a GELU backward off by 5% passed the gradient check")
	}
	a, b, da, db := randn(r, n, 1), randn(r, n, 1), make([]float32, n), make([]float32, n)
	overwrite := gradCase{
		vars:     []fdVar{{"a", a, da}, {"b", b, db}},
		loss:     func() float64 { ResidualForward(k, out, a, b, n); return probe(out, w) },
		backward: func() { copy(da, w); copy(db, w) },
	}
	if _, p := fdCompare(overwrite, 1); len(p) != 2 {
		t.Errorf("an overwriting backward gave %d problems, want 2", len(p))
	}
	zero := gradCase{
		vars:     []fdVar{{"a", a, da}},
		loss:     func() float64 { return 0 },
		backward: func() {},
	}
	if _, p := fdCompare(zero, 1); len(p) != 1 {
		t.Error("an identically zero gradient passed the check")
	}
}
