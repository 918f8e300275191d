package ops

import (
	"math/rand/v2"
	"slices"
	"testing"

	"trellis/tensor"
)

// GroupedGemm gives every product's bits as Gemm alone gives them, for
// any thread count (one goroutine per product with enough products, all
// threads per product with few), fp32 and bf16, set and accumulated.
func TestGroupedGemm(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	rows := []int{0, 37, 5, 64, 1, 19, 0, 40}
	const K, N = 24, 33
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
		for _, acc := range []bool{false, true} {
			var gs []GEMM
			var outs [][]float32
			for _, m := range rows {
				a, b := make([]float32, m*K), make([]float32, N*K)
				for i := range a {
					a[i] = float32(r.NormFloat64())
				}
				for i := range b {
					b[i] = float32(r.NormFloat64())
				}
				c := make([]float32, m*N)
				for i := range c {
					c[i] = float32(r.NormFloat64())
				}
				outs = append(outs, c)
				gs = append(gs, GEMM{Layout: NT, M: m, N: N, K: K, A: buf(dt, a), LDA: K, B: buf(dt, b), LDB: K, LDC: N, Acc: acc})
			}
			ref := run(t, 1, gs, outs, false)
			for _, threads := range []int{1, 2, 3, 16} {
				if got := run(t, threads, gs, outs, true); !equalAll(got, ref) {
					t.Errorf("%v acc=%v threads=%d: grouped products differ from one by one", dt, acc, threads)
				}
			}
		}
	}
}

func buf(dt tensor.DType, x []float32) tensor.Buf {
	if dt == tensor.F32 {
		return tensor.F32s(x)
	}
	h := make([]uint16, len(x))
	for i, v := range x {
		h[i] = uint16(tensor.ToBF16(v))
	}
	return tensor.Halves(dt, h)
}

// run computes gs on fresh copies of outs, grouped or one by one.
func run(t *testing.T, threads int, gs []GEMM, outs [][]float32, grouped bool) [][]float32 {
	k, err := New(Config{Threads: threads})
	if err != nil {
		t.Fatal(err)
	}
	cs := make([][]float32, len(outs))
	g := slices.Clone(gs)
	for i := range outs {
		cs[i] = slices.Clone(outs[i])
		g[i].C = cs[i]
	}
	if grouped {
		k.GroupedGemm(g)
	} else {
		for _, x := range g {
			k.Gemm(x)
		}
	}
	return cs
}

func equalAll(a, b [][]float32) bool {
	for i := range a {
		if !slices.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// The dispatch, combine and router kernels against their definitions.
func TestMoEKernels(t *testing.T) {
	k, _ := New(Config{Threads: 2})
	const N, K, C, E = 3, 2, 4, 3
	rows := []int32{0, 3, -1, 1, 2, -1}
	src := make([]float32, N*C)
	for i := range src {
		src[i] = float32(i)
	}
	dst := make([]float32, 4*C)
	k.MoEDispatch(tensor.F32s(dst), tensor.F32s(src), rows, N, K, C)
	for r, tok := range []int{0, 1, 2, 0} {
		if !slices.Equal(dst[r*C:(r+1)*C], src[tok*C:(tok+1)*C]) {
			t.Errorf("dispatched row %d is not token %d", r, tok)
		}
	}
	gates := []float32{0.5, 0.25, 9, 2, 1, 9}
	out := make([]float32, N*C)
	k.MoECombine(out, dst, gates, rows, N, K, C)
	for c := 0; c < C; c++ {
		want := []float32{0.75 * src[c], 2 * src[C+c], src[2*C+c]}
		for tok := range want {
			if out[tok*C+c] != want[tok] {
				t.Errorf("combine token %d channel %d: %g, want %g", tok, c, out[tok*C+c], want[tok])
			}
		}
	}
	dyr, dg := make([]float32, 4*C), make([]float32, N*K)
	dy := []float32{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0}
	k.MoECombineBackward(dyr, dg, dy, dst, gates, rows, N, K, C)
	if want := []float32{0, 0, 0, 5, 10, 0}; !slices.Equal(dg, want) {
		t.Errorf("gate gradients %v, want %v", dg, want)
	}
	if dyr[3*C] != 0.25 || dyr[C+1] != 2 {
		t.Errorf("dispatched gradients %v", dyr)
	}
	logits := []float32{0, 0, 0, 1, 2, 3, -5, 0, 5}
	p := make([]float32, N*E)
	k.RouterSoftmax(p, logits, N, E)
	if p[0] != float32(1.0/3) || !(p[8] > 0.99) {
		t.Errorf("softmax %v", p)
	}
	dp := []float32{1, 1, 1, 0, 0, 0, 0, 0, 0}
	dl := make([]float32, N*E)
	k.RouterSoftmaxBackwardSet(dl, p, dp, N, E)
	for _, v := range dl[:3] { // a constant dp moves nothing
		if v > 1e-7 || v < -1e-7 {
			t.Errorf("softmax gradient of a constant %v", dl[:3])
		}
	}
}
