package model

import (
	"math"
	"math/rand/v2"
	"testing"

	"trellis/tensor"
)

// The norm layer, LayerNorm and RMSNorm (Llama's, added as a layer type
// without touching any strategy), against central differences of a
// scalar probe Σ out⊙r: its input and parameter gradients, accumulated
// (the backward adds to what the buffers held), over a runner's scratch.
func TestNormLayerGradients(t *testing.T) {
	for _, l := range []norm{{}, {rms: true, eps: 1e-6}} {
		name := "layernorm"
		if l.rms {
			name = "rmsnorm"
		}
		t.Run(name, func(t *testing.T) {
			cfg := Config{Layers: 1, Hidden: 24, Heads: 2, SeqLen: 5, Vocab: 11}
			m, _, _, _ := setup(t, cfg, 2, 1)
			const n = 10 // tokens: B·T
			C := cfg.Hidden
			r := rand.New(rand.NewPCG(3, 4))
			rnd := func(k int, std, mean float64) []float32 {
				x := make([]float32, k)
				for i := range x {
					x[i] = float32(mean + std*r.NormFloat64())
				}
				return x
			}
			x, w, b, probe := rnd(n*C, 1.5, 0.3), rnd(C, 0.5, 1), rnd(C, 0.5, 0), rnd(n*C, 1, 0)
			if l.rms {
				b = nil
			}
			a := normActs{out: tensor.F32s(make([]float32, n*C)), mean: make([]float32, n), rstd: make([]float32, n)}
			loss := func() float64 {
				out := l.forward(m, a, x, w, b, n).F32()
				var s float64
				for i, v := range out {
					s += float64(v) * float64(probe[i])
				}
				return s
			}
			loss()
			dx, dw, db := rnd(n*C, 1, 0), rnd(C, 1, 0), rnd(C, 1, 0)
			dx0, dw0, db0 := append([]float32(nil), dx...), append([]float32(nil), dw...), append([]float32(nil), db...)
			if l.rms {
				db, db0 = nil, nil
			}
			if err := l.backward(m, dx, dw, db, probe, x, w, a, n); err != nil {
				t.Fatal(err)
			}
			check := func(what string, v []float32, grad, before []float32) {
				t.Helper()
				var maxDiff, maxNum float64
				for i := range v {
					x0 := v[i]
					const eps = 1e-2
					v[i] = x0 + eps
					lp := loss()
					v[i] = x0 - eps
					lm := loss()
					v[i] = x0
					num := (lp - lm) / (float64(x0+eps) - float64(x0-eps))
					maxNum = max(maxNum, math.Abs(num))
					maxDiff = max(maxDiff, math.Abs(num-(float64(grad[i])-float64(before[i]))))
				}
				if e := maxDiff / maxNum; maxNum == 0 || e > 2e-3 {
					t.Errorf("%s: relative error %.3g (max |numeric| %.3g)", what, e, maxNum)
				}
			}
			check("input", x, dx, dx0)
			check("weight", w, dw, dw0)
			if !l.rms {
				check("bias", b, db, db0)
			}
		})
	}
}
