package ops

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"trellis/rng"
)

// maxAbsDiff is max_i |a_i − b_i| in float64.
func maxAbsDiff(a []float32, b []float64) float64 {
	var m float64
	for i := range a {
		m = max(m, math.Abs(float64(a[i])-b[i]))
	}
	return m
}

// naiveAttention is causal self-attention written from its definition, in
// float64: out[b,t,h·HS+d] = Σ_{s<=t} softmax_s(q_t·k_s/√HS)·v_s[d], query
// head h reading key/value head ⌊h·KV/NH⌋ of rows [q | k | v].
func naiveAttention(qkv []float32, B, T, C, NH, KV int) []float64 {
	HS := C / NH
	ld, G := C+2*KV*HS, NH/KV
	out := make([]float64, B*T*C)
	q := func(b, t, h, d int) float64 { return float64(qkv[(b*T+t)*ld+h*HS+d]) }
	kv := func(b, t, part, h, d int) float64 { return float64(qkv[(b*T+t)*ld+C+part*KV*HS+(h/G)*HS+d]) }
	for b := 0; b < B; b++ {
		for h := 0; h < NH; h++ {
			for t := 0; t < T; t++ {
				sc := make([]float64, t+1)
				m := math.Inf(-1)
				for s := 0; s <= t; s++ {
					for d := 0; d < HS; d++ {
						sc[s] += q(b, t, h, d) * kv(b, s, 0, h, d)
					}
					sc[s] /= math.Sqrt(float64(HS))
					m = max(m, sc[s])
				}
				var z float64
				for s := range sc {
					sc[s] = math.Exp(sc[s] - m)
					z += sc[s]
				}
				for s := range sc {
					for d := 0; d < HS; d++ {
						out[(b*T+t)*C+h*HS+d] += sc[s] / z * kv(b, s, 1, h, d)
					}
				}
			}
		}
	}
	return out
}

func TestAttentionForwardMatchesDefinition(t *testing.T) {
	// Heads of 32 and 64 channels take the tiled path on AVX-512.
	// KV < NH: grouped-query attention (KV = 1: multi-query).
	cases := []struct{ B, T, C, NH, KV int }{{2, 5, 8, 2, 2}, {1, 70, 12, 3, 3}, {2, 130, 8, 1, 1}, {2, 37, 64, 2, 2}, {1, 61, 128, 2, 2},
		{2, 37, 24, 6, 2}, {1, 45, 128, 4, 1}, {3, 19, 192, 6, 3}}
	for _, c := range cases {
		for _, kc := range kernelConfigs {
			k := newKernelsConfig(t, kc)
			r := rand.New(rand.NewPCG(5, 6))
			qkv := randn(r, c.B*c.T*(c.C+2*c.KV*(c.C/c.NH)), 1)
			out, att := make([]float32, c.B*c.T*c.C), make([]float32, c.B*c.NH*c.T*c.T)
			for i := range att {
				att[i] = 7 // stale values must not survive
			}
			AttentionForward(k, out, att, qkv, c.B, c.T, c.C, c.NH, c.KV)
			if d := maxAbsDiff(out, naiveAttention(qkv, c.B, c.T, c.C, c.NH, c.KV)); d > 1e-5 {
				t.Errorf("%+v %s: max |out − reference| = %.3g", c, configName(kc), d)
			}
			for row := 0; row < c.B*c.NH*c.T; row++ {
				i := row % c.T
				var s float64
				for j, p := range att[row*c.T : (row+1)*c.T] {
					if j > i && p != 0 {
						t.Fatalf("%+v: att row %d attends to future key %d", c, i, j)
					}
					s += float64(p)
				}
				if math.Abs(s-1) > 1e-5 {
					t.Fatalf("%+v: att row %d sums to %v", c, row, s)
				}
			}
		}
	}
}

func TestForwardValues(t *testing.T) {
	k := newKernels(t, 3)
	r := rand.New(rand.NewPCG(8, 9))
	t.Run("layernorm", func(t *testing.T) {
		N, C := 3, 300
		x := randn(r, N*C, 3)
		w, b := make([]float32, C), make([]float32, C)
		for i := range w {
			w[i], b[i] = 2, -1
		}
		out, mean, rstd := make([]float32, N*C), make([]float32, N), make([]float32, N)
		LayerNormForward(k, out, mean, rstd, x, w, b, N, C)
		for n := 0; n < N; n++ {
			var m, v float64
			for _, xv := range x[n*C : n*C+C] {
				m += float64(xv)
			}
			m /= float64(C)
			for _, xv := range x[n*C : n*C+C] {
				v += (float64(xv) - m) * (float64(xv) - m)
			}
			v /= float64(C)
			want := make([]float64, C)
			for i, xv := range x[n*C : n*C+C] {
				want[i] = (float64(xv)-m)/math.Sqrt(v+LayerNormEps)*2 - 1
			}
			if d := maxAbsDiff(out[n*C:n*C+C], want); d > 1e-5 {
				t.Errorf("row %d: max error %.3g", n, d)
			}
			if math.Abs(float64(mean[n])-m) > 1e-5 || math.Abs(float64(rstd[n])-1/math.Sqrt(v+LayerNormEps)) > 1e-5 {
				t.Errorf("row %d: saved mean/rstd %v/%v, want %v/%v", n, mean[n], rstd[n], m, 1/math.Sqrt(v+LayerNormEps))
			}
		}
	})
	t.Run("gelu", func(t *testing.T) {
		x := []float32{-6, -3, -1, -0.1, 0, 1e-5, 0.5, 1, 2.5, 8}
		out := make([]float32, len(x))
		GELUForward(k, out, x, len(x))
		want := make([]float64, len(x))
		for i, v := range x {
			xv := float64(v)
			want[i] = 0.5 * xv * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(xv+0.044715*xv*xv*xv)))
		}
		if d := maxAbsDiff(out, want); d > 1e-6 {
			t.Errorf("max error %.3g: got %v, want %v", d, out, want)
		}
	})
	t.Run("crossentropy", func(t *testing.T) {
		N, V := 4, 50
		x := randn(r, N*V, 3)
		x[V+7] = 60 // a near-certain prediction for row 1
		targets := []int32{3, 8, 49, 0}
		probs, losses := make([]float32, N*V), make([]float32, N)
		logits := slices.Clone(x)
		mean := CrossEntropyForward(k, logits, losses, logits, targets, N, V) // probs aliasing logits
		var sum float64
		for n := 0; n < N; n++ {
			m := math.Inf(-1)
			for _, v := range x[n*V : n*V+V] {
				m = max(m, float64(v))
			}
			var z float64
			for _, v := range x[n*V : n*V+V] {
				z += math.Exp(float64(v) - m)
			}
			want := math.Log(z) + m - float64(x[n*V+int(targets[n])])
			sum += want
			if math.Abs(float64(losses[n])-want) > 1e-5*max(1, want) {
				t.Errorf("row %d: loss %v, want %v", n, losses[n], want)
			}
		}
		if math.Abs(float64(mean)-sum/float64(N)) > 1e-5 {
			t.Errorf("mean loss %v, want %v", mean, sum/float64(N))
		}
		_ = probs
		for n := 0; n < N; n++ {
			if s := sum32(logits[n*V : n*V+V]); math.Abs(float64(s)-1) > 1e-5 {
				t.Errorf("row %d: probabilities sum to %v", n, s)
			}
		}
	})
	t.Run("encoder", func(t *testing.T) {
		B, T, C := 1, 2, 3
		wte := []float32{1, 2, 3, 10, 20, 30}
		wpe := []float32{0.5, 0.5, 0.5, 0.25, 0.25, 0.25}
		out := make([]float32, B*T*C)
		EncoderForward(k, out, []int32{1, 0}, wte, wpe, B, T, C)
		if want := []float32{10.5, 20.5, 30.5, 1.25, 2.25, 3.25}; !slices.Equal(out, want) {
			t.Errorf("got %v, want %v", out, want)
		}
	})
}

func TestDropoutMask(t *testing.T) {
	k := newKernels(t, 3)
	n := 1 << 16
	x := make([]float32, n)
	for i := range x {
		x[i] = 1
	}
	d := Dropout{Stream: rng.Key(1, "drop").Sub(5), Offset: 1000, P: 0.25}
	out := make([]float32, n)
	d.Forward(k, out, x, n)
	var kept int
	for _, v := range out {
		switch v {
		case 0:
		case 1 / 0.75:
			kept++
		default:
			t.Fatalf("dropout output %v is neither 0 nor 1/(1−p)", v)
		}
	}
	if f := float64(kept) / float64(n); math.Abs(f-0.75) > 0.01 {
		t.Errorf("kept fraction %.4f, want 0.75", f)
	}
	// The mask depends only on the global index: two halves with their own
	// offsets reproduce the whole, at any split.
	for _, split := range []int{1, 4097, n / 2} {
		part := make([]float32, n)
		Dropout{d.Stream, d.Offset, d.P}.Forward(newKernels(t, 1), part[:split], x[:split], split)
		Dropout{d.Stream, d.Offset + uint64(split), d.P}.Forward(k, part[split:], x[split:], n-split)
		if !slices.Equal(part, out) {
			t.Errorf("split at %d changes the mask", split)
		}
	}
	// P = 0 is the identity.
	Dropout{Stream: d.Stream}.Forward(k, out, x, n)
	if !slices.Equal(out, x) {
		t.Error("dropout with p=0 is not the identity")
	}
}

// Reductions (dW, db, dwte) must not depend on the thread count.
func TestBackwardThreadIndependent(t *testing.T) {
	run := func(th int) [][]float32 {
		k := newKernels(t, th)
		r := rand.New(rand.NewPCG(3, 4))
		N, C := 37, 70
		x, g, b, dy := randn(r, N*C, 1), randn(r, C, 1), randn(r, C, 1), randn(r, N*C, 1)
		out, mean, rstd := make([]float32, N*C), make([]float32, N), make([]float32, N)
		LayerNormForward(k, out, mean, rstd, x, g, b, N, C)
		dx, dg, db, dbias := make([]float32, N*C), make([]float32, C), make([]float32, C), make([]float32, C)
		LayerNormBackward(k, dx, dg, db, dy, x, g, mean, rstd, N, C)
		BiasBackward(k, dbias, dy, N, C)
		inp := make([]int32, N)
		for i := range inp {
			inp[i] = int32(i % 3)
		}
		dwte, dwpe := make([]float32, 3*C), make([]float32, N*C)
		EncoderBackward(k, dwte, dwpe, dy, inp, 1, N, C)
		return [][]float32{out, dx, dg, db, dbias, dwte, dwpe}
	}
	one := run(1)
	for _, th := range []int{2, 3, 5} {
		many := run(th)
		for i := range one {
			if !slices.Equal(one[i], many[i]) {
				t.Errorf("result %d differs between 1 and %d threads", i, th)
			}
		}
	}
}

// The Set variants must equal their accumulating twins applied to a zero
// buffer, whatever the buffer held before.
func TestSetVariants(t *testing.T) {
	for _, kc := range kernelConfigs {
		k := newKernelsConfig(t, kc)
		r := rand.New(rand.NewPCG(21, 22))
		N, C, OC := 7, 37, 19
		inp, w, dout := randn(r, N*C, 1), randn(r, OC*C, 1), randn(r, N*OC, 1)
		acc, set := make([]float32, N*C), randn(r, N*C, 5) // garbage to be overwritten
		dw1, dw2, db1, db2 := make([]float32, OC*C), make([]float32, OC*C), make([]float32, OC), make([]float32, OC)
		LinearBackward(k, acc, dw1, db1, dout, inp, w, N, C, OC)
		LinearBackwardSet(k, set, dw2, db2, dout, inp, w, N, C, OC)
		if !slices.Equal(acc, set) || !slices.Equal(dw1, dw2) || !slices.Equal(db1, db2) {
			t.Errorf("%s: LinearBackwardSet differs from LinearBackward into zeros", configName(kc))
		}
		n := 1000
		x, dy := randn(r, n, 2), randn(r, n, 1)
		acc, set = make([]float32, n), randn(r, n, 5)
		GELUBackward(k, acc, x, dy, n)
		GELUBackwardSet(k, set, x, dy, n)
		if !slices.Equal(acc, set) {
			t.Errorf("%s: GELUBackwardSet differs from GELUBackward into zeros", configName(kc))
		}
	}
}
