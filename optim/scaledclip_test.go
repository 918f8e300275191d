package optim

import (
	"math"
	"testing"
)

// ScaledClip skips on a non-finite global norm and otherwise unscales the
// norm and folds 1/S into the clipping factor.
func TestScaledClip(t *testing.T) {
	for _, n := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if _, _, skip := ScaledClip(n, 1, 1.0/1024); !skip {
			t.Errorf("n=%v: not skipped", n)
		}
	}
	// ‖S·g‖ = 4096 at S = 1024: ‖g‖ = 4, clipped to 1 → scale (1/4)/1024.
	norm, scale, skip := ScaledClip(4096, 1, 1.0/1024)
	if skip || norm != 4 || math.Abs(scale-ClipScale(4, 1)/1024) > 0 || math.Abs(scale*1024-0.25) > 1e-6 {
		t.Errorf("got norm %v scale %v skip %v, want 4, ≈1/4096, false", norm, scale, skip)
	}
	// No clipping: the scale is 1/S exactly.
	if _, scale, _ := ScaledClip(512, 0, 1.0/1024); scale != 1.0/1024 {
		t.Errorf("maxNorm 0: scale %v, want 1/1024", scale)
	}
}
