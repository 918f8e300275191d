package optim

import "math"

// SumSquares returns Σ x² over every element of every slice, each square and
// the sum in float64. It is the per-shard partial of the global gradient
// norm: under ZeRO each rank computes SumSquares of its gradient shard, the
// partials are all-reduced (summed) over the data-parallel group, and
// ClipScale(math.Sqrt(total), max) gives every rank the same factor.
//
// The order of summation is fixed by the slices alone, so the result is
// bit-identical from run to run.
func SumSquares(xs ...[]float32) float64 {
	var total float64
	for _, x := range xs {
		var s0, s1, s2, s3 float64
		i := 0
		for ; i+4 <= len(x); i += 4 {
			a, b, c, d := float64(x[i]), float64(x[i+1]), float64(x[i+2]), float64(x[i+3])
			s0 += a * a
			s1 += b * b
			s2 += c * c
			s3 += d * d
		}
		for ; i < len(x); i++ {
			a := float64(x[i])
			s0 += a * a
		}
		total += (s0 + s1) + (s2 + s3)
	}
	return total
}

// GlobalNorm returns the Euclidean norm of all slices taken together,
// ‖g‖ = √(Σ_slices Σ_i g_i²). A NaN or Inf gradient gives a NaN or +Inf
// norm, which the caller should treat as a step to skip.
func GlobalNorm(xs ...[]float32) float64 { return math.Sqrt(SumSquares(xs...)) }

// ClipScale returns the factor that clips a gradient of norm `norm` to at
// most maxNorm, as torch.nn.utils.clip_grad_norm_ does:
//
//	scale = min(1, maxNorm / (norm + 1e-6))
//
// maxNorm <= 0 disables clipping (scale 1). Pass the factor to AdamW.Step
// as its gradient scale rather than rescaling the gradients.
func ClipScale(norm, maxNorm float64) float64 {
	if maxNorm <= 0 {
		return 1
	}
	return min(1, maxNorm/(norm+1e-6))
}

// ScaledClip is the clipping of fp16 loss scaling's update, whose
// gradients hold S·g (inv = 1/S), from n = ‖S·g‖, the global norm: an
// overflow on any rank makes n non-finite on every rank, and then the step
// is skipped (skip true); otherwise AdamW steps with the gradient scale
//
//	norm = n·inv      scale = inv · ClipScale(norm, maxNorm)
func ScaledClip(n, maxNorm, inv float64) (norm, scale float64, skip bool) {
	if math.IsNaN(n) || math.IsInf(n, 0) {
		return n, 0, true
	}
	norm = n * inv
	return norm, ClipScale(norm, maxNorm) * inv, false
}
