package ops

import (
	"math"
	"math/rand/v2"
	"testing"

	"trellis/tensor"
)

// TestMatMulBF16Ep: on every bf16 path, C = src + bias + A·Bᵀ equals
// filling C with src + bias and accumulating MatMulBF16 on top, bit for
// bit, with and without src and bias.
func TestMatMulBF16Ep(t *testing.T) {
	const m, n, kk = 13, 37, 29
	r := rand.New(rand.NewPCG(3, 4))
	bf := func(k int) []tensor.BF16Bits {
		s := make([]tensor.BF16Bits, k)
		for i := range s {
			s[i] = tensor.ToBF16(float32(r.NormFloat64()))
		}
		return s
	}
	f := func(k int) []float32 {
		s := make([]float32, k)
		for i := range s {
			s[i] = float32(r.NormFloat64())
		}
		return s
	}
	a, b, src, bias := bf(m*kk), bf(n*kk), f(m*n), f(n)
	for _, hi := range halfImpls() {
		for _, tc := range []struct {
			name      string
			src, bias []float32
		}{{"none", nil, nil}, {"src", src, nil}, {"bias", nil, bias}, {"both", src, bias}} {
			got := make([]float32, m*n)
			hi.k.MatMulBF16Ep(NT, m, n, kk, a, kk, b, kk, got, n, tc.src, tc.bias)
			want := make([]float32, m*n)
			BiasForward(hi.k, want, tc.src, tc.bias, m, n)
			hi.k.MatMulBF16(NT, m, n, kk, a, kk, b, kk, want, n, true)
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s %s: element %d: %g, want %g", hi.name, tc.name, i, got[i], want[i])
				}
			}
		}
	}
}

// TestMatMulF16Ep: MatMulF16Ep equals filling C with src + bias and
// accumulating MatMulF16 on top, bit for bit.
func TestMatMulF16Ep(t *testing.T) {
	const m, n, kk = 13, 37, 29
	r := rand.New(rand.NewPCG(3, 5))
	h := func(k int) []tensor.F16Bits {
		s := make([]tensor.F16Bits, k)
		for i := range s {
			s[i] = tensor.ToF16(float32(r.NormFloat64()))
		}
		return s
	}
	a, b := h(m*kk), h(n*kk)
	src, bias := make([]float32, m*n), make([]float32, n)
	for i := range src {
		src[i] = float32(r.NormFloat64())
	}
	for i := range bias {
		bias[i] = float32(r.NormFloat64())
	}
	for _, hi := range halfImpls() {
		got := make([]float32, m*n)
		hi.k.MatMulF16Ep(NT, m, n, kk, a, kk, b, kk, got, n, src, bias)
		want := make([]float32, m*n)
		BiasForward(hi.k, want, src, bias, m, n)
		hi.k.MatMulF16(NT, m, n, kk, a, kk, b, kk, want, n, true)
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s: element %d: %g, want %g", hi.name, i, got[i], want[i])
			}
		}
	}
}
