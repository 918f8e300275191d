package ops

import (
	"math/rand/v2"
	"testing"

	"trellis/rng"
)

// Benchmarks of the non-matmul kernels at the reference model's sizes
// (B=8, T=256, C=256, NH=4, V=512), one thread. ns/op is per call; the
// elements/s metric counts the elements a call touches.
//
//	go test ./ops -run ^$ -bench 'Elementwise'
func BenchmarkElementwise(b *testing.B) {
	const B, T, C, NH, V = 8, 256, 256, 4, 512
	BT := B * T
	r := rand.New(rand.NewPCG(1, 2))
	k := newKernels(b, 1)
	x4, y4, d4 := randn(r, BT*4*C, 1), make([]float32, BT*4*C), randn(r, BT*4*C, 1)
	x, y, d := randn(r, BT*C, 1), make([]float32, BT*C), randn(r, BT*C, 1)
	w, bias := randn(r, C, 1), randn(r, C, 1)
	mean, rstd := make([]float32, BT), make([]float32, BT)
	logits, probs, losses := randn(r, BT*V, 2), make([]float32, BT*V), make([]float32, BT)
	targets := make([]int32, BT)
	qkv, att, scratch := randn(r, BT*3*C, 1), make([]float32, B*NH*T*T), make([]float32, AttentionScratchSize(k, B, T, NH))
	dqkv := make([]float32, BT*3*C)
	LayerNormForward(k, y, mean, rstd, x, w, bias, BT, C)
	CrossEntropyForward(k, probs, losses, logits, targets, BT, V)
	AttentionForward(k, y, att, qkv, B, T, C, NH, NH)
	cases := []struct {
		name string
		n    int
		fn   func()
	}{
		{"gelu_fwd", BT * 4 * C, func() { GELUForward(k, y4, x4, BT*4*C) }},
		{"gelu_bwd", BT * 4 * C, func() { GELUBackward(k, y4, x4, d4, BT*4*C) }},
		{"layernorm_fwd", BT * C, func() { LayerNormForward(k, y, mean, rstd, x, w, bias, BT, C) }},
		{"layernorm_bwd", BT * C, func() { LayerNormBackward(k, y, w, bias, d, x, w, mean, rstd, BT, C) }},
		{"bias_bwd", BT * C, func() { BiasBackward(k, w, d, BT, C) }},
		{"residual_fwd", BT * C, func() { ResidualForward(k, y, x, d, BT*C) }},
		{"crossentropy_fwd", BT * V, func() { CrossEntropyForward(k, probs, losses, logits, targets, BT, V) }},
		{"crossentropy_bwd", BT * V, func() { CrossEntropyBackward(k, logits, probs, targets, 1, BT, V) }},
		{"attention_fwd", B * NH * T * T / 2, func() { AttentionForward(k, y, att, qkv, B, T, C, NH, NH) }},
		{"attention_bwd", B * NH * T * T / 2, func() { AttentionBackward(k, dqkv, scratch, y, qkv, att, B, T, C, NH, NH) }},
		{"dropout_fwd", BT * C, func() { Dropout{Stream: rng.Key(1, "d"), P: 0.1}.Forward(k, y, x, BT*C) }},
		{"clear_4C", BT * 4 * C, func() { clear(y4) }},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				c.fn()
			}
			b.ReportMetric(float64(c.n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gelem/s")
		})
	}
}
