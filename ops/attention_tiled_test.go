package ops

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestAttentionTiledMatchesBlocked holds the tiled path (AVX-512, heads of
// whole 32-column tiles) to the blocked one on the same inputs: outputs,
// probabilities and accumulated gradients within fp32 rounding, for
// sequence lengths that end mid micro-panel and mid tile, with key/value
// heads shared by groups of query heads.
func TestAttentionTiledMatchesBlocked(t *testing.T) {
	for _, threads := range []int{1, 3} {
		k := newKernels(t, threads)
		if !tiledAttn(k, 32) {
			t.Skip("no tiled path on this CPU")
		}
		for _, c := range []struct{ B, T, C, NH, KV int }{{1, 1, 32, 1, 1}, {2, 13, 64, 2, 2}, {1, 45, 64, 1, 1}, {2, 100, 128, 2, 2}, {2, 45, 128, 4, 1}, {1, 29, 192, 6, 2}} {
			r := rand.New(rand.NewPCG(uint64(c.T), 3))
			BTC, W := c.B*c.T*c.C, c.B*c.T*(c.C+2*c.KV*(c.C/c.NH))
			qkv, dout := randn(r, W, 1), randn(r, BTC, 1)
			init := randn(r, W, 1) // dqkv accumulates onto this
			var outs, atts, grads [2][]float32
			for p, tiled := range []bool{false, true} {
				g := newAttnGeom(k, c.T, c.C, c.NH, c.KV)
				g.tiled = tiled
				outs[p], atts[p] = make([]float32, BTC), make([]float32, c.B*c.NH*c.T*c.T)
				grads[p] = append([]float32(nil), init...)
				scratch := make([]float32, AttentionScratchSize(k, c.B, c.T, c.KV))
				forEachGroup(k, c.B*c.KV, func(ks *Kernels, w, bg int) {
					if tiled {
						g.groupForwardTiled(ks, outs[p], atts[p], qkv, bg)
						return
					}
					for bh := range g.heads(bg) {
						g.headForward(ks, outs[p], atts[p], qkv, bh)
					}
				})
				per := c.T * c.T
				forEachGroup(k, c.B*c.KV, func(ks *Kernels, w, bg int) {
					ds := scratch[w*per : (w+1)*per]
					if tiled {
						g.groupBackwardTiled(ks, grads[p], ds, dout, qkv, atts[p], bg, true)
						return
					}
					for bh := range g.heads(bg) {
						g.headBackward(ks, grads[p], ds, dout, qkv, atts[p], bh)
					}
				})
			}
			name := fmt.Sprintf("threads=%d %+v", threads, c)
			for _, x := range []struct {
				what string
				a, b []float32
			}{{"out", outs[0], outs[1]}, {"att", atts[0], atts[1]}, {"dqkv", grads[0], grads[1]}} {
				for i := range x.a {
					if d := math.Abs(float64(x.a[i] - x.b[i])); d > 2e-5*(1+math.Abs(float64(x.a[i]))) {
						t.Fatalf("%s: %s[%d] blocked %g, tiled %g", name, x.what, i, x.a[i], x.b[i])
					}
				}
			}
		}
	}
}

// TestSoftmaxRowVector holds the AVX-512 row softmax and its gradient to
// the pure-Go ones for every tail length.
func TestSoftmaxRowVector(t *testing.T) {
	if !haveAVX512 {
		t.Skip("no AVX-512")
	}
	r := rand.New(rand.NewPCG(9, 9))
	for n := 1; n <= 70; n++ {
		x := randn(r, n, 3)
		var out [2][]float32
		var stats [2][2]float32
		for p, v := range []bool{false, true} {
			out[p] = make([]float32, n)
			stats[p][0], stats[p][1] = softmaxRowStats(v, out[p], x, 0.7)
		}
		for i := range x {
			if d := math.Abs(float64(out[0][i] - out[1][i])); d > 1e-6 {
				t.Fatalf("n=%d: softmax[%d] Go %g, AVX-512 %g", n, i, out[0][i], out[1][i])
			}
		}
		if stats[0][0] != stats[1][0] || math.Abs(float64(stats[0][1]/stats[1][1]-1)) > 1e-6 {
			t.Fatalf("n=%d: (max, sum) Go %v, AVX-512 %v", n, stats[0], stats[1])
		}
		dy := randn(r, n, 1)
		var grad [2][]float32
		for p, v := range []bool{false, true} {
			grad[p] = append([]float32(nil), dy...)
			softmaxGradRow(v, grad[p], out[0], 0.7)
		}
		for i := range x {
			if d := math.Abs(float64(grad[0][i] - grad[1][i])); d > 1e-6 {
				t.Fatalf("n=%d: grad[%d] Go %g, AVX-512 %g", n, i, grad[0][i], grad[1][i])
			}
		}
	}
}

// TestAttentionBackwardSet checks that AttentionBackwardSet over garbage
// gives the bits of AttentionBackward into zeros, on both paths.
func TestAttentionBackwardSet(t *testing.T) {
	for _, kc := range kernelConfigs {
		k := newKernelsConfig(t, kc)
		for _, c := range []struct{ B, T, C, NH int }{{2, 13, 8, 2}, {2, 29, 64, 2}} {
			r := rand.New(rand.NewPCG(4, uint64(c.T)))
			BTC := c.B * c.T * c.C
			qkv, dout := randn(r, 3*BTC, 1), randn(r, BTC, 1)
			out, att := make([]float32, BTC), make([]float32, c.B*c.NH*c.T*c.T)
			scratch := make([]float32, AttentionScratchSize(k, c.B, c.T, c.NH))
			AttentionForward(k, out, att, qkv, c.B, c.T, c.C, c.NH, c.NH)
			acc, set := make([]float32, 3*BTC), randn(r, 3*BTC, 5)
			AttentionBackward(k, acc, scratch, dout, qkv, att, c.B, c.T, c.C, c.NH, c.NH)
			AttentionBackwardSet(k, set, scratch, dout, qkv, att, c.B, c.T, c.C, c.NH, c.NH)
			for i := range acc {
				if math.Float32bits(acc[i]) != math.Float32bits(set[i]) {
					t.Fatalf("%s %+v: dqkv[%d]: accumulated into zeros %g, set %g", configName(kc), c, i, acc[i], set[i])
				}
			}
		}
	}
}

// TestSoftmaxCausalRows holds the causal panel kernels to the row kernels
// they loop, bit for bit.
func TestSoftmaxCausalRows(t *testing.T) {
	if !haveAVX512 {
		t.Skip("no AVX-512")
	}
	r := rand.New(rand.NewPCG(2, 2))
	const ld, n0, rows = 50, 14, 20
	x, p := randn(r, rows*ld, 2), randn(r, rows*ld, 1)
	got, want := append([]float32(nil), x...), append([]float32(nil), x...)
	softmaxCausalAVX512(&got[0], ld, n0, rows, 0.3)
	gg, gw := append([]float32(nil), x...), append([]float32(nil), x...)
	softmaxGradCausalAVX512(&gg[0], ld, &p[0], ld, n0, rows, 0.3)
	for j := 0; j < rows; j++ {
		n := n0 + j
		var res [2]float32
		softmaxRowAVX512(&want[j*ld], &want[j*ld], n, 0.3, &res[0])
		softmaxGradRowAVX512(&gw[j*ld], &p[j*ld], n, 0.3)
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) || math.Float32bits(gg[i]) != math.Float32bits(gw[i]) {
			t.Fatalf("element %d: softmax %g vs %g, gradient %g vs %g", i, got[i], want[i], gg[i], gw[i])
		}
	}
}
