package profile

import (
	"context"
	"math/rand/v2"
	"time"

	"trellis/ops"
	"trellis/tensor"
)

// HalfSample is the 16-bit GEMMs' speed against fp32's on the same
// products: the engine's bf16 and fp16 linear layers (ops.MatMulBF16,
// MatMulF16: 16-bit operands, fp32 accumulation) on the shapes of a small
// model's layers (gemmShapes' last five).
type HalfSample struct {
	F32, BF16, F16 float64 // seconds for all the shapes, fastest rounds
}

// BF16Ratio and F16Ratio are how much faster the 16-bit GEMMs ran than
// fp32's (1 when not measured): the planner's bf16 and fp16 peaks are the
// fp32 peak times these, as its GEMM efficiency curve is shared.
func (h HalfSample) BF16Ratio() float64 { return ratio(h.F32, h.BF16) }

// F16Ratio: see BF16Ratio.
func (h HalfSample) F16Ratio() float64 { return ratio(h.F32, h.F16) }

func ratio(f32, half float64) float64 {
	if !(f32 > 0) || !(half > 0) {
		return 1
	}
	return f32 / half
}

// measureHalf times the small-model GEMM shapes in fp32, bf16 and fp16 on k.
func measureHalf(ctx context.Context, c Config, k *ops.Kernels) (HalfSample, error) {
	shapes := gemmShapes(c.Quick)
	shapes = shapes[len(shapes)-5:]
	budget := 100 * time.Millisecond
	if c.Quick {
		budget = 30 * time.Millisecond
	}
	r := rand.New(rand.NewPCG(3, 4))
	var h HalfSample
	for _, s := range shapes {
		a, b, out := randSlice(r, s.M*s.K), randSlice(r, s.K*s.N), make([]float32, s.M*s.N)
		ab, bb := make([]tensor.BF16Bits, len(a)), make([]tensor.BF16Bits, len(b))
		tensor.EncodeBF16(ab, a)
		tensor.EncodeBF16(bb, b)
		ah, bh := make([]tensor.F16Bits, len(a)), make([]tensor.F16Bits, len(b))
		tensor.EncodeF16(ah, a)
		tensor.EncodeF16(bh, b)
		for _, m := range []struct {
			t *float64
			f func()
		}{
			{&h.F32, func() { k.MatMul(ops.NN, s.M, s.N, s.K, a, s.K, b, s.N, out, s.N, false) }},
			{&h.BF16, func() { k.MatMulBF16(ops.NN, s.M, s.N, s.K, ab, s.K, bb, s.N, out, s.N, false) }},
			{&h.F16, func() { k.MatMulF16(ops.NN, s.M, s.N, s.K, ah, s.K, bh, s.N, out, s.N, false) }},
		} {
			sec, err := timeIt(ctx, budget, m.f)
			if err != nil {
				return HalfSample{}, err
			}
			*m.t += sec
		}
	}
	return h, nil
}
