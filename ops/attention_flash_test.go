package ops

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// flashCase is one attention shape under test.
type flashCase struct{ B, T, C, NH, KV int }

// W is the length of the case's qkv, B·T·(C + 2·KV·HS).
func (c flashCase) W() int { return c.B * c.T * (c.C + 2*c.KV*(c.C/c.NH)) }

// TestFlashAttentionMatchesNaive holds FlashAttentionForward and
// FlashAttentionBackward to the materialising kernels (AttentionForward,
// AttentionBackward) within 1e-5 (relative to max(1, |want|)) at T = 64,
// 256, 1024 and 4096, on the tiled path (heads of 32 or 64 channels on
// AVX-512), the portable one (HS = 24, and isa generic), and uneven
// blocks (T = 300); lse against log Σ exp of the scores, in float64.
func TestFlashAttentionMatchesNaive(t *testing.T) {
	cases := []struct {
		c   flashCase
		cfg Config
	}{
		{flashCase{2, 64, 128, 2, 2}, Config{Threads: 2}},
		{flashCase{1, 256, 128, 2, 2}, Config{Threads: 1}},
		{flashCase{1, 300, 48, 2, 2}, Config{Threads: 1}}, // HS = 24: portable path
		{flashCase{1, 300, 64, 2, 2}, Config{Threads: 1}},
		{flashCase{1, 1024, 64, 1, 1}, Config{Threads: 1}},
		{flashCase{1, 4096, 32, 1, 1}, Config{Threads: 1}},
		{flashCase{2, 130, 64, 2, 2}, Config{Threads: 2, ISA: "generic"}},
		// Grouped-query attention: 4 query heads per key/value head, and
		// multi-query; tiled (HS = 32) and portable (HS = 24).
		{flashCase{2, 300, 256, 8, 2}, Config{Threads: 2}},
		{flashCase{1, 130, 96, 4, 1}, Config{Threads: 1}},
		{flashCase{2, 70, 96, 4, 2}, Config{Threads: 2, ISA: "generic"}},
	}
	for _, tc := range cases {
		c := tc.c
		t.Run(fmt.Sprintf("%s/B%dT%dC%dNH%dKV%d", configName(tc.cfg), c.B, c.T, c.C, c.NH, c.KV), func(t *testing.T) {
			k := newKernelsConfig(t, tc.cfg)
			r := rand.New(rand.NewPCG(uint64(c.T), 7))
			qkv, dout := randn(r, c.W(), 1), randn(r, c.B*c.T*c.C, 1)
			out, att := make([]float32, c.B*c.T*c.C), make([]float32, c.B*c.NH*c.T*c.T)
			dqkv := randn(r, len(qkv), 1) // accumulated into: both start from it
			AttentionForward(k, out, att, qkv, c.B, c.T, c.C, c.NH, c.KV)
			wantD := append([]float32(nil), dqkv...)
			AttentionBackward(k, wantD, make([]float32, AttentionScratchSize(k, c.B, c.T, c.KV)), dout, qkv, att, c.B, c.T, c.C, c.NH, c.KV)
			att = nil

			fout, lse := make([]float32, len(out)), make([]float32, c.B*c.NH*c.T)
			for i := range fout {
				fout[i] = float32(math.NaN()) // never read
			}
			FlashAttentionForward(k, fout, lse, qkv, c.B, c.T, c.C, c.NH, c.KV)
			closeTo(t, "out", fout, out, 1e-5)
			FlashAttentionBackward(k, dqkv, dout, qkv, fout, lse, c.B, c.T, c.C, c.NH, c.KV)
			closeTo(t, "dqkv", dqkv, wantD, 1e-5)
			if c.T <= 300 {
				closeTo(t, "lse", lse, lseRef(qkv, c), 1e-5)
			}
		})
	}
}

// closeTo fails t at the first got[i] farther than tol·max(1, |want[i]|)
// from want[i].
func closeTo(t *testing.T, name string, got, want []float32, tol float64) {
	t.Helper()
	worst := 0.0
	for i := range want {
		d := math.Abs(float64(got[i]) - float64(want[i]))
		if !(d <= tol*max(1, math.Abs(float64(want[i])))) {
			t.Fatalf("%s[%d] = %g, want %g (|diff| %g > %g)", name, i, got[i], want[i], d, tol)
		}
		worst = max(worst, d)
	}
	t.Logf("%s: max |diff| %.3g", name, worst)
}

// lseRef is log Σ_{j<=i} exp(Q_i·K_j/√HS) per (b, h, i), in float64.
func lseRef(qkv []float32, c flashCase) []float32 {
	HS := c.C / c.NH
	ld, G := c.C+2*c.KV*HS, c.NH/c.KV
	out := make([]float32, c.B*c.NH*c.T)
	for b := range c.B {
		for h := range c.NH {
			for i := range c.T {
				sc := make([]float64, i+1)
				m := math.Inf(-1)
				for j := 0; j <= i; j++ {
					var s float64
					for d := range HS {
						s += float64(qkv[(b*c.T+i)*ld+h*HS+d]) * float64(qkv[(b*c.T+j)*ld+c.C+(h/G)*HS+d])
					}
					sc[j] = s / math.Sqrt(float64(HS))
					m = max(m, sc[j])
				}
				var z float64
				for _, s := range sc {
					z += math.Exp(s - m)
				}
				out[(b*c.NH+h)*c.T+i] = float32(m + math.Log(z))
			}
		}
	}
	return out
}

// TestFlashAttentionGradients is the finite-difference check of
// FlashAttentionBackward (through fdCompare: it must accumulate), on the
// tiled and the portable paths, with T spanning two query and two key
// blocks in the larger case.
func TestFlashAttentionGradients(t *testing.T) {
	for _, c := range []struct {
		name    string
		fc      flashCase
		samples int
	}{
		{"tiny", flashCase{2, 5, 8, 2, 2}, 0},
		{"HS=32 T=29", flashCase{2, 29, 64, 2, 2}, 300},
		{"HS=32 T=300 (2 key blocks)", flashCase{1, 300, 32, 1, 1}, 100},
		{"GQA 6:2 tiny", flashCase{2, 5, 24, 6, 2}, 0},
		{"MQA HS=32 T=29", flashCase{2, 29, 128, 4, 1}, 300},
	} {
		for i, kc := range kernelConfigs {
			t.Run(c.name+"/"+configName(kc), func(t *testing.T) {
				k := newKernelsConfig(t, kc)
				checkGrads(t, flashGradCase(k, rand.New(rand.NewPCG(43, uint64(i))), c.fc, c.samples))
			})
		}
	}
}

func flashGradCase(k *Kernels, r *rand.Rand, c flashCase, samples int) gradCase {
	B, T, C, NH, KV := c.B, c.T, c.C, c.NH, c.KV
	qkv, dqkv := randn(r, c.W(), 1), make([]float32, c.W())
	out, lse, w := make([]float32, B*T*C), make([]float32, B*NH*T), randn(r, B*T*C, 1)
	return gradCase{
		vars: []fdVar{{"qkv", qkv, dqkv}},
		loss: func() float64 { FlashAttentionForward(k, out, lse, qkv, B, T, C, NH, KV); return probe(out, w) },
		backward: func() {
			FlashAttentionForward(k, out, lse, qkv, B, T, C, NH, KV)
			FlashAttentionBackward(k, dqkv, w, qkv, out, lse, B, T, C, NH, KV)
		},
		samples: samples,
	}
}

// TestEdgeKernels16 holds each 16-column row kernel (1 to 12 rows, every
// column count 1 to 16, with and without an accumulated src) to the
// float64 product: C[i][j] = Σ_p a[i·sa+p]·b[p·sb+j] (+ src), columns
// past cols left untouched.
func TestEdgeKernels16(t *testing.T) {
	k := newKernelsConfig(t, Config{Threads: 1})
	ks := edgeKernels16(k.impl)
	if ks == nil {
		t.Skip("no 16-column kernels for isa " + k.impl.name)
	}
	r := rand.New(rand.NewPCG(5, 6))
	const kc, sa, sb, ldc = 37, 41, 32, 20
	a, b := randn(r, 12*sa, 1), randn(r, kc*sb, 1)
	for rows := 1; rows <= 12; rows++ {
		for cols := 1; cols <= 16; cols++ {
			for _, acc := range []bool{false, true} {
				c := randn(r, 12*ldc, 1)
				c0 := append([]float32(nil), c...)
				var src *float32
				if acc {
					src = &c[0]
				}
				ks[rows](kc, &a[0], sa, &b[0], sb, &c[0], ldc, cols, src, nil)
				for i := range 12 {
					for j := range ldc {
						want := float64(c0[i*ldc+j])
						if i < rows && j < cols {
							s := 0.0
							for p := range kc {
								s += float64(a[i*sa+p]) * float64(b[p*sb+j])
							}
							if acc {
								s += float64(c0[i*ldc+j])
							}
							want = s
						}
						if d := math.Abs(float64(c[i*ldc+j]) - want); d > 1e-4*max(1, math.Abs(want)) {
							t.Fatalf("%dx16r cols=%d acc=%v: C[%d][%d] = %g, want %g", rows, cols, acc, i, j, c[i*ldc+j], want)
						}
					}
				}
			}
		}
	}
}

// TestFlashTileMath holds the flash tiles' exp (expFlash, through
// flashGradTileAVX512's P and flashExpTileAVX512's probabilities) and
// flashFinishAVX512's log to float64: e^t within 1.2e-7 relative on
// [−10, 0] and 4e-7 on [−87, 0] (where ln2's rounding shows, at e^t <
// 1e-37), ln l within 1.2e-7 absolute on [1, 2^20], 1/l within 1 ulp.
func TestFlashTileMath(t *testing.T) {
	if !haveAVX512 {
		t.Skip("no AVX-512")
	}
	const n = 1 << 16
	for _, c := range []struct {
		lo, tol float64
	}{{-10, 1.2e-7}, {-87, 4e-7}} {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(c.lo * float64(i) / (n - 1))
		}
		p, ds := append([]float32(nil), x...), make([]float32, n)
		zero := []float32{0}
		flashGradTileAVX512(&ds[0], &p[0], n, n, n, 0, 1, 1, &zero[0], &zero[0])
		q := append([]float32(nil), x...)
		mla := []float32{0, 0, 0} // m = 0 >= max: q = exp(x), l = Σ
		flashExpTileAVX512(&q[0], n, n, n, 1, 1, &mla[0], 1)
		for i, v := range x {
			want := math.Exp(float64(v))
			for _, got := range []float32{p[i], q[i]} {
				if d := math.Abs(float64(got)-want) / want; !(d <= c.tol) {
					t.Fatalf("exp(%g) = %g, want %g (relative %.3g > %g)", v, got, want, d, c.tol)
				}
			}
		}
	}
	l, m := make([]float32, 37), make([]float32, 37)
	for i := range l {
		l[i] = float32(math.Pow(2, 20*float64(i)/36)) * (1 + float32(i%5)/7)
	}
	lse, inv := make([]float32, len(l)), make([]float32, len(l))
	flashFinishAVX512(&m[0], &l[0], len(l), &lse[0], &inv[0])
	for i, v := range l {
		if d := math.Abs(float64(lse[i]) - math.Log(float64(v))); !(d <= 1.2e-7*max(1, math.Log(float64(v)))) {
			t.Fatalf("ln %g = %g, want %g", v, lse[i], math.Log(float64(v)))
		}
		if inv[i] != 1/v {
			t.Fatalf("1/%g = %g, want %g", v, inv[i], 1/v)
		}
	}
}
