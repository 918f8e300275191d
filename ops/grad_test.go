package ops

import (
	"math"
	"math/rand/v2"
	"testing"

	"trellis/rng"
	"trellis/tensor"
)

// gradCases builds, for kernels k, every kernel's finite-difference case.
var gradCases = []struct {
	name  string
	build func(k *Kernels, r *rand.Rand) gradCase
}{
	{"encoder", func(k *Kernels, r *rand.Rand) gradCase {
		B, T, C, V := 2, 3, 5, 4
		inp := []int32{0, 3, 3, 1, 3, 0} // repeated tokens share dwte rows
		wte, wpe := randn(r, V*C, 1), randn(r, T*C, 1)
		dwte, dwpe := make([]float32, V*C), make([]float32, T*C)
		out, w := make([]float32, B*T*C), randn(r, B*T*C, 1)
		return gradCase{
			vars:     []fdVar{{"wte", wte, dwte}, {"wpe", wpe, dwpe}},
			loss:     func() float64 { EncoderForward(k, out, inp, wte, wpe, B, T, C); return probe(out, w) },
			backward: func() { EncoderBackward(k, dwte, dwpe, w, inp, B, T, C) },
		}
	}},
	{"layernorm", func(k *Kernels, r *rand.Rand) gradCase {
		N, C := 5, 7
		inp, g, b := randn(r, N*C, 2), randn(r, C, 1), randn(r, C, 1)
		for i := range inp {
			inp[i] += 0.5 // a non-zero mean
		}
		dinp, dg, db := make([]float32, N*C), make([]float32, C), make([]float32, C)
		out, mean, rstd, w := make([]float32, N*C), make([]float32, N), make([]float32, N), randn(r, N*C, 1)
		return gradCase{
			vars: []fdVar{{"inp", inp, dinp}, {"weight", g, dg}, {"bias", b, db}},
			loss: func() float64 { LayerNormForward(k, out, mean, rstd, inp, g, b, N, C); return probe(out, w) },
			backward: func() {
				LayerNormForward(k, out, mean, rstd, inp, g, b, N, C)
				LayerNormBackward(k, dinp, dg, db, w, inp, g, mean, rstd, N, C)
			},
		}
	}},
	{"rmsnorm", func(k *Kernels, r *rand.Rand) gradCase {
		N, C := 5, 37 // a column count past one 16-wide chunk with a tail
		inp, g := randn(r, N*C, 2), randn(r, C, 1)
		dinp, dg := make([]float32, N*C), make([]float32, C)
		out, rstd, w := make([]float32, N*C), make([]float32, N), randn(r, N*C, 1)
		return gradCase{
			vars: []fdVar{{"inp", inp, dinp}, {"weight", g, dg}},
			loss: func() float64 { RMSNormForward(k, out, rstd, inp, g, N, C, 1e-5); return probe(out, w) },
			backward: func() {
				RMSNormForward(k, out, rstd, inp, g, N, C, 1e-5)
				RMSNormBackward(k, dinp, dg, w, inp, g, rstd, N, C)
			},
		}
	}},
	{"rows (vocab-parallel lookup)", func(k *Kernels, r *rand.Rand) gradCase {
		T, C, lo, n := 3, 5, 2, 3 // this rank holds ids 2, 3, 4
		ids := []int32{0, 3, 4, 2, 3, 5}
		wte, wpe := randn(r, n*C, 1), randn(r, T*C, 1)
		dwte, dwpe := make([]float32, n*C), make([]float32, T*C)
		part, out, w := make([]float32, len(ids)*C), make([]float32, len(ids)*C), randn(r, len(ids)*C, 1)
		return gradCase{
			vars: []fdVar{{"wte", wte, dwte}, {"wpe", wpe, dwpe}},
			loss: func() float64 {
				k.LookupRows(part, ids, tensor.F32s(wte), lo, n, C)
				k.AddPositions(out, part, tensor.F32s(wpe), 0, T, len(ids), C)
				return probe(out, w)
			},
			backward: func() { k.RowsBackward(dwte, dwpe, w, ids, lo, n, T, C) },
		}
	}},
	{"linear", func(k *Kernels, r *rand.Rand) gradCase {
		N, C, OC := 4, 5, 3
		inp, wt, bias := randn(r, N*C, 1), randn(r, OC*C, 1), randn(r, OC, 1)
		dinp, dwt, dbias := make([]float32, N*C), make([]float32, OC*C), make([]float32, OC)
		out, w := make([]float32, N*OC), randn(r, N*OC, 1)
		return gradCase{
			vars:     []fdVar{{"inp", inp, dinp}, {"weight", wt, dwt}, {"bias", bias, dbias}},
			loss:     func() float64 { LinearForward(k, out, inp, wt, bias, N, C, OC); return probe(out, w) },
			backward: func() { LinearBackward(k, dinp, dwt, dbias, w, inp, wt, N, C, OC) },
		}
	}},
	{"linear+residual", func(k *Kernels, r *rand.Rand) gradCase {
		N, C, OC := 3, 4, 6
		res, inp, wt, bias := randn(r, N*OC, 1), randn(r, N*C, 1), randn(r, OC*C, 1), randn(r, OC, 1)
		dres, dinp, dwt, dbias := make([]float32, N*OC), make([]float32, N*C), make([]float32, OC*C), make([]float32, OC)
		out, w := make([]float32, N*OC), randn(r, N*OC, 1)
		return gradCase{
			vars: []fdVar{{"res", res, dres}, {"inp", inp, dinp}, {"weight", wt, dwt}, {"bias", bias, dbias}},
			loss: func() float64 { LinearResidualForward(k, out, res, inp, wt, bias, N, C, OC); return probe(out, w) },
			backward: func() {
				AddInto(k, dres, w, N*OC)
				LinearBackward(k, dinp, dwt, dbias, w, inp, wt, N, C, OC)
			},
		}
	}},
	{"bias", func(k *Kernels, r *rand.Rand) gradCase {
		N, OC := 5, 40 // several channel chunks with 3 threads
		res, bias := randn(r, N*OC, 1), randn(r, OC, 1)
		dres, dbias := make([]float32, N*OC), make([]float32, OC)
		out, w := make([]float32, N*OC), randn(r, N*OC, 1)
		return gradCase{
			vars:     []fdVar{{"res", res, dres}, {"bias", bias, dbias}},
			loss:     func() float64 { BiasForward(k, out, res, bias, N, OC); return probe(out, w) },
			backward: func() { AddInto(k, dres, w, N*OC); BiasBackward(k, dbias, w, N, OC) },
		}
	}},
	{"residual", func(k *Kernels, r *rand.Rand) gradCase {
		n := 2500 // more than one 1024-element chunk
		a, b, da, db := randn(r, n, 1), randn(r, n, 1), make([]float32, n), make([]float32, n)
		out, w := make([]float32, n), randn(r, n, 1)
		return gradCase{
			vars:     []fdVar{{"a", a, da}, {"b", b, db}},
			loss:     func() float64 { ResidualForward(k, out, a, b, n); return probe(out, w) },
			backward: func() { ResidualBackward(k, da, db, w, n) },
			samples:  200,
		}
	}},
	{"gelu", func(k *Kernels, r *rand.Rand) gradCase {
		n := 1500
		x, dx := randn(r, n, 2), make([]float32, n)
		out, w := make([]float32, n), randn(r, n, 1)
		return gradCase{
			vars:     []fdVar{{"x", x, dx}},
			loss:     func() float64 { GELUForward(k, out, x, n); return probe(out, w) },
			backward: func() { GELUBackward(k, dx, x, w, n) },
			eps:      3e-3,
		}
	}},
	{"softmax", func(k *Kernels, r *rand.Rand) gradCase {
		N, V := 4, 9
		x, dx := randn(r, N*V, 2), make([]float32, N*V)
		out, w := make([]float32, N*V), randn(r, N*V, 1)
		return gradCase{
			vars: []fdVar{{"x", x, dx}},
			loss: func() float64 { SoftmaxForward(k, out, x, N, V); return probe(out, w) },
			backward: func() {
				SoftmaxForward(k, out, x, N, V)
				SoftmaxBackward(k, dx, w, out, N, V)
			},
		}
	}},
	{"crossentropy", func(k *Kernels, r *rand.Rand) gradCase {
		N, V := 6, 11
		x, dx := randn(r, N*V, 2), make([]float32, N*V)
		targets := []int32{0, 10, 3, 3, 7, 1}
		probs, losses := make([]float32, N*V), make([]float32, N)
		const dloss = 0.7
		return gradCase{
			vars: []fdVar{{"logits", x, dx}},
			loss: func() float64 {
				CrossEntropyForward(k, probs, losses, x, targets, N, V)
				var s float64
				for _, l := range losses {
					s += float64(l)
				}
				return dloss * s / float64(N)
			},
			backward: func() {
				CrossEntropyForward(k, probs, losses, x, targets, N, V)
				CrossEntropyBackward(k, dx, probs, targets, dloss, N, V)
			},
		}
	}},
	{"attention", func(k *Kernels, r *rand.Rand) gradCase {
		return attentionCase(k, r, 2, 5, 8, 2, 2, 0)
	}},
	{"attention T=70 (two causal blocks)", func(k *Kernels, r *rand.Rand) gradCase {
		return attentionCase(k, r, 1, 70, 8, 2, 2, 300)
	}},
	{"attention HS=32 T=29 (tiled on AVX-512)", func(k *Kernels, r *rand.Rand) gradCase {
		return attentionCase(k, r, 2, 29, 64, 2, 2, 300)
	}},
	{"attention GQA 6:2", func(k *Kernels, r *rand.Rand) gradCase {
		return attentionCase(k, r, 2, 7, 24, 6, 2, 0)
	}},
	{"attention MQA HS=32 T=29 (tiled on AVX-512)", func(k *Kernels, r *rand.Rand) gradCase {
		return attentionCase(k, r, 2, 29, 128, 4, 1, 300)
	}},
	{"rope", func(k *Kernels, r *rand.Rand) gradCase {
		B, T, NH, KV, HS := 2, 5, 4, 2, 6
		W := B * T * (NH + 2*KV) * HS
		x, dx := randn(r, W, 1), make([]float32, W)
		cos, sin := make([]float32, T*HS/2), make([]float32, T*HS/2)
		RoPETable(cos, sin, T, HS, 10000)
		out, w := make([]float32, W), randn(r, W, 1)
		return gradCase{
			vars: []fdVar{{"qkv", x, dx}},
			loss: func() float64 { copy(out, x); RoPEForward(k, out, cos, sin, B, T, NH, KV, HS); return probe(out, w) },
			backward: func() {
				g := append([]float32(nil), w...)
				RoPEBackward(k, g, cos, sin, B, T, NH, KV, HS)
				AddInto(k, dx, g, W)
			},
		}
	}},
	{"swiglu", func(k *Kernels, r *rand.Rand) gradCase {
		N, F := 7, 37
		gu, dgu := randn(r, 2*N*F, 2), make([]float32, 2*N*F)
		act, w := make([]float32, N*F), randn(r, N*F, 1)
		return gradCase{
			vars: []fdVar{{"gate_up", gu, dgu}},
			loss: func() float64 { SwiGLUForward(k, act, gu, N, F); return probe(act, w) },
			backward: func() {
				g := make([]float32, 2*N*F)
				SwiGLUBackwardSet(k, g, gu, w, N, F)
				AddInto(k, dgu, g, 2*N*F)
			},
		}
	}},
	{"dropout", func(k *Kernels, r *rand.Rand) gradCase {
		n := 5000 // two chunks
		x, dx := randn(r, n, 1), make([]float32, n)
		out, w := make([]float32, n), randn(r, n, 1)
		d := Dropout{Stream: rng.Key(3, "dropout"), Offset: 17, P: 0.3}
		return gradCase{
			vars:     []fdVar{{"x", x, dx}},
			loss:     func() float64 { d.Forward(k, out, x, n); return probe(out, w) },
			backward: func() { d.Backward(k, dx, w, n) },
			samples:  400,
		}
	}},
}

func attentionCase(k *Kernels, r *rand.Rand, B, T, C, NH, KV, samples int) gradCase {
	W := B * T * (C + 2*KV*(C/NH))
	qkv, dqkv := randn(r, W, 1), make([]float32, W)
	att, out, w := make([]float32, B*NH*T*T), make([]float32, B*T*C), randn(r, B*T*C, 1)
	scratch := make([]float32, AttentionScratchSize(k, B, T, KV))
	return gradCase{
		vars: []fdVar{{"qkv", qkv, dqkv}},
		loss: func() float64 { AttentionForward(k, out, att, qkv, B, T, C, NH, KV); return probe(out, w) },
		backward: func() {
			AttentionForward(k, out, att, qkv, B, T, C, NH, KV)
			AttentionBackward(k, dqkv, scratch, w, qkv, att, B, T, C, NH, KV)
		},
		samples: samples,
	}
}

// TestGradients is the finite-difference check of every backward, under
// each thread count.
func TestGradients(t *testing.T) {
	for _, c := range gradCases {
		for i, kc := range kernelConfigs {
			t.Run(c.name+"/"+configName(kc), func(t *testing.T) {
				k := newKernelsConfig(t, kc)
				checkGrads(t, c.build(k, rand.New(rand.NewPCG(42, uint64(i)))))
			})
		}
	}
}

// TestSwiGLUKernels holds the AVX2 kernels to the Go loops (isa generic)
// within 4e-7 of the row's largest magnitude, over every tail length and
// the whole range of gates, the saturated ones (|g| > 88) included.
func TestSwiGLUKernels(t *testing.T) {
	if !haveAVX2 {
		t.Skip("no AVX2")
	}
	r := rand.New(rand.NewPCG(3, 4))
	for n := 1; n <= 41; n++ {
		g, u, d := randn(r, n, 8), randn(r, n, 1), randn(r, n, 1)
		if n > 3 {
			g[0], g[1], g[2] = -100, 100, 0
		}
		var act, dg, du [2][]float32
		for p, v := range []bool{false, true} {
			act[p], dg[p], du[p] = make([]float32, n), make([]float32, n), make([]float32, n)
			swigluRow(v, act[p], g, u)
			swigluGradRow(v, dg[p], du[p], g, u, d)
		}
		for _, x := range []struct {
			name string
			a    [2][]float32
		}{{"act", act}, {"dgate", dg}, {"dup", du}} {
			scale := 0.0
			for _, w := range x.a[0] {
				scale = max(scale, math.Abs(float64(w)))
			}
			for i := range x.a[0] {
				w, got := float64(x.a[0][i]), float64(x.a[1][i])
				if math.Abs(got-w) > 4e-7*scale {
					t.Fatalf("n=%d %s[%d] (g=%g): AVX2 %g, Go %g", n, x.name, i, g[i], got, w)
				}
			}
		}
	}
}

// TestRMSNormKernels holds RMSNorm on the AVX2 kernels to the Go loops
// (isa generic): outputs, rstd and both gradients within 2e-6 relative to
// their largest magnitude, for widths with and without a tail.
func TestRMSNormKernels(t *testing.T) {
	if !haveAVX2 {
		t.Skip("no AVX2")
	}
	r := rand.New(rand.NewPCG(5, 6))
	for _, C := range []int{8, 13, 37, 256} {
		N := 5
		x, w, dy := randn(r, N*C, 2), randn(r, C, 1), randn(r, N*C, 1)
		var out, rstd, dx, dw [2][]float32
		for p, isa := range []string{"generic", ""} {
			k := newKernelsConfig(t, Config{Threads: 3, ISA: isa})
			out[p], rstd[p], dx[p], dw[p] = make([]float32, N*C), make([]float32, N), make([]float32, N*C), make([]float32, C)
			RMSNormForward(k, out[p], rstd[p], x, w, N, C, 1e-5)
			RMSNormBackward(k, dx[p], dw[p], dy, x, w, rstd[p], N, C)
		}
		for _, c := range []struct {
			name string
			a    [2][]float32
		}{{"out", out}, {"rstd", rstd}, {"dx", dx}, {"dw", dw}} {
			scale := 0.0
			for _, v := range c.a[0] {
				scale = max(scale, math.Abs(float64(v)))
			}
			for i := range c.a[0] {
				if d := math.Abs(float64(c.a[1][i] - c.a[0][i])); d > 2e-6*scale {
					t.Fatalf("C=%d %s[%d]: AVX2 %g, Go %g", C, c.name, i, c.a[1][i], c.a[0][i])
				}
			}
		}
	}
}
