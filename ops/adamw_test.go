package ops

import (
	"math"
	"math/rand/v2"
	"testing"
)

// adamwRef is the update of AdamW's doc comment in float64.
func adamwRef(p, g, m, v []float64, lr, b1, b2, eps, wd, scale float64, t int) {
	for i := range p {
		gi := g[i] * scale
		m[i] = b1*m[i] + (1-b1)*gi
		v[i] = b2*v[i] + (1-b2)*gi*gi
		mh := m[i] / (1 - math.Pow(b1, float64(t)))
		vh := v[i] / (1 - math.Pow(b2, float64(t)))
		p[i] -= lr * (mh/(math.Sqrt(vh)+eps) + wd*p[i])
	}
}

func randVec(r *rand.Rand, n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * scale)
	}
	return x
}

func widen(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

func TestAdamWAgainstFloat64(t *testing.T) {
	cases := []struct {
		name                     string
		n, steps                 int
		lr, b1, b2, eps, wd, scl float64
	}{
		{"gpt2", 1000, 20, 6e-4, 0.9, 0.95, 1e-8, 0.1, 1},
		{"no-decay", 333, 10, 1e-3, 0.9, 0.999, 1e-8, 0, 1},
		{"big-lr-decay", 64, 5, 0.1, 0.8, 0.9, 1e-6, 0.5, 1},
		{"beta1-zero", 100, 7, 1e-2, 0, 0.99, 1e-8, 0.01, 1},
		{"grad-scale", 500, 8, 3e-3, 0.9, 0.95, 1e-8, 0.1, 0.37},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, uint64(tc.n)))
			p := randVec(r, tc.n, 0.5)
			m, v := make([]float32, tc.n), make([]float32, tc.n)
			pr, mr, vr := widen(p), make([]float64, tc.n), make([]float64, tc.n)
			for step := 1; step <= tc.steps; step++ {
				g := randVec(r, tc.n, 0.02)
				h := AdamWHyper{LR: float32(tc.lr), Beta1: float32(tc.b1), Beta2: float32(tc.b2),
					Eps: float32(tc.eps), WeightDecay: float32(tc.wd), GradScale: float32(tc.scl), Step: step}
				AdamWUpdate(h, p, g, m, v)
				adamwRef(pr, widen(g), mr, vr, float64(h.LR), float64(h.Beta1), float64(h.Beta2),
					float64(h.Eps), float64(h.WeightDecay), float64(h.GradScale), step)
			}
			var worst float64
			for i := range p {
				// Errors are relative to the distance travelled, the part
				// the optimizer computed.
				d := math.Abs(float64(p[i]) - pr[i])
				worst = max(worst, d/(tc.lr*float64(tc.steps)))
			}
			if worst > 1e-4 {
				t.Fatalf("max error / (lr·steps) = %.3g, want <= 1e-4", worst)
			}
		})
	}
}

// TestAdamWFirstStep checks the closed form of the first update without
// decay: m̂ = g and v̂ = g², so p moves by −η·g/(|g|+ε) ≈ −η·sign(g).
func TestAdamWFirstStep(t *testing.T) {
	p := []float32{1, 1, 1, 1}
	g := []float32{0.5, -2, 1e-3, -1e-5}
	m, v := make([]float32, 4), make([]float32, 4)
	AdamW(p, g, m, v, 0.01, 0.9, 0.95, 1e-8, 0, 1)
	for i := range p {
		want := 1 - 0.01*float64(g[i])/(math.Abs(float64(g[i]))+1e-8)
		if math.Abs(float64(p[i])-want) > 1e-6 {
			t.Errorf("p[%d] = %v, want %v", i, p[i], want)
		}
	}
	// With a zero gradient only the decay acts: p ← p − η·λ·p.
	q := []float32{2}
	AdamW(q, []float32{0}, []float32{0}, []float32{0}, 0.1, 0.9, 0.95, 1e-8, 0.5, 1)
	if want := float32(2 - 0.1*0.5*2); q[0] != want {
		t.Errorf("decay only: p = %v, want %v", q[0], want)
	}
}

func TestAdamWParallelBitIdentical(t *testing.T) {
	const n = 100_003
	r := rand.New(rand.NewPCG(7, 7))
	p0, g := randVec(r, n, 1), randVec(r, n, 0.1)
	h := AdamWHyper{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, GradScale: 1, Step: 3}
	run := func(threads int) []float32 {
		p := append([]float32(nil), p0...)
		m, v := make([]float32, n), make([]float32, n)
		if threads == 0 {
			AdamWUpdate(h, p, g, m, v)
			return p
		}
		k, err := New(Config{Threads: threads, ISA: "generic"})
		if err != nil {
			t.Fatal(err)
		}
		k.AdamW(h, p, g, m, v)
		return p
	}
	want := run(0)
	for _, th := range []int{1, 2, 3, 8} {
		got := run(th)
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("threads=%d: p[%d] = %v, serial %v", th, i, got[i], want[i])
			}
		}
	}
}

func TestAdamWPanicsOnMisuse(t *testing.T) {
	cases := []struct {
		name string
		fn   func()
	}{
		{"length", func() {
			AdamW(make([]float32, 3), make([]float32, 2), make([]float32, 3), make([]float32, 3), 1, 0.9, 0.9, 1e-8, 0, 1)
		}},
		{"step0", func() {
			AdamW(make([]float32, 3), make([]float32, 3), make([]float32, 3), make([]float32, 3), 1, 0.9, 0.9, 1e-8, 0, 0)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			tc.fn()
		})
	}
}

// TestAdamWVectorBitIdentical holds the AVX-512 update to the scalar one,
// bit for bit, over several steps of gradients spanning many magnitudes
// (zeros, denormals and large values among them) and lengths with tails.
func TestAdamWVectorBitIdentical(t *testing.T) {
	if !haveAVX512 {
		t.Skip("no AVX-512")
	}
	r := rand.New(rand.NewPCG(3, 5))
	for _, n := range []int{1, 16, 31, 1000} {
		p0 := randVec(r, n, 1)
		ps := [2][]float32{append([]float32(nil), p0...), append([]float32(nil), p0...)}
		ms := [2][]float32{make([]float32, n), make([]float32, n)}
		vs := [2][]float32{make([]float32, n), make([]float32, n)}
		for step := 1; step <= 5; step++ {
			g := randVec(r, n, 1)
			for i := range g {
				g[i] *= float32(math.Pow(10, float64(r.IntN(80)-50))) // 1e-50 (0) … 1e29
			}
			h := AdamWHyper{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, GradScale: 0.7, Step: step}
			c := h.coefficients(n, n, n, n)
			for k, simd := range []bool{false, true} {
				c.apply(simd, ps[k], g, ms[k], vs[k])
			}
		}
		for i := range p0 {
			for _, x := range [][2]float32{{ps[0][i], ps[1][i]}, {ms[0][i], ms[1][i]}, {vs[0][i], vs[1][i]}} {
				if math.Float32bits(x[0]) != math.Float32bits(x[1]) {
					t.Fatalf("n=%d, element %d: scalar %g, AVX-512 %g", n, i, x[0], x[1])
				}
			}
		}
	}
}
