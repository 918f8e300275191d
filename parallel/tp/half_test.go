package tp

import (
	"math"
	"testing"

	"trellis/model"
	"trellis/tensor"
)

// worstDiffs are how far one rank's pass lies from a single device's: the
// losses' largest relative difference, the gradients' largest absolute
// one over the global elements the rank holds, and the logits' largest
// absolute one.
func worstDiffs(ref, got pass) (loss, grad, logit float64) {
	for i := range ref.losses {
		loss = max(loss, math.Abs(float64(got.losses[i]-ref.losses[i]))/math.Abs(float64(ref.losses[i])))
	}
	for _, u := range got.lay.Units {
		for _, tn := range u.Tensors {
			g0, _ := ref.lay.Tensor(tn.Name)
			want, loc := ref.g[g0.Offset:g0.Offset+g0.Size], got.g[tn.Offset:tn.Offset+tn.Size]
			tn.Global.Runs(tn.Valid(), func(l, gl, n int) {
				for i := 0; i < n; i++ {
					grad = max(grad, math.Abs(float64(loc[l+i]-want[gl+i])))
				}
			})
		}
	}
	for i := range ref.logits {
		logit = max(logit, math.Abs(float64(got.logits[i]-ref.logits[i])))
	}
	return loss, grad, logit
}

// halfPartBounds are TestHalfPartsMatchOneDevice's bounds on a rank's
// distance from the single device's 16-bit pass: loss (relative) and
// gradient (absolute). Measured worst over the cases (rank by rank): bf16
// 1.0e-5 and 2.1e-4, fp16 1.6e-6 and 2.6e-5, all without dropout: the
// single device fuses the residual and bias into the GEMM's epilogue,
// tp adds them after the group's sum, and where that fp32 ulp lies next
// to a 16-bit rounding boundary the next stored value rounds the other
// way (one 2⁻⁸ or 2⁻¹¹ step on one element). With dropout (unfused on
// both) the gradients agree within 3e-8. The bounds leave a factor 4-5.
var halfPartBounds = map[tensor.DType][2]float64{tensor.BF16: {5e-5, 1e-3}, tensor.F16: {8e-6, 1.5e-4}}

// TestHalfPartsMatchOneDevice: in bf16 and fp16, tp ∈ {2, 4} with and
// without sequence parallelism and dropout (TestPartsMatchOneDevice's
// shapes), every rank computes the single device's 16-bit pass — the same
// 16-bit stash values, rounded at the same points, from the same rounded
// weights (model/tp16.go): its inference logits equal the single device's
// 16-bit ones within 1e-5 relative (measured: bit for bit) while the fp32
// run's lie more than 10 times that away; its losses and gradients lie
// within halfPartBounds of the 16-bit run and at most half as far from
// it as from the fp32 run.
func TestHalfPartsMatchOneDevice(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.BF16, tensor.F16} {
		bl, bg := halfPartBounds[dt][0], halfPartBounds[dt][1]
		eachPartCase(t, dt.String()+"/", func(t *testing.T, cfg model.Config, tp int, sp bool) {
			const B = 3
			ref, err := runPart(t, cfg, model.Part{}, nil, B, dt)
			if err != nil {
				t.Fatal(err)
			}
			ref32, err := runPart(t, cfg, model.Part{}, nil, B, tensor.F32)
			if err != nil {
				t.Fatal(err)
			}
			for r, got := range runTP(t, cfg, tp, sp, B, dt) {
				l, g, z := worstDiffs(ref, got)
				l32, g32, z32 := worstDiffs(ref32, got)
				t.Logf("rank %d: against one device in %s: loss %.3g, grad %.3g, logit %.3g; in fp32: %.3g, %.3g, %.3g", r, dt, l, g, z, l32, g32, z32)
				if l > bl || g > bg {
					t.Errorf("rank %d: loss rel %.3g, gradient %.3g from one device's %s run: over %g, %g", r, l, g, dt, bl, bg)
				}
				if l > l32/2 || g > g32/2 {
					t.Errorf("rank %d: loss rel %.3g, gradient %.3g from one device's %s run, %.3g, %.3g from its fp32 run: not half as far", r, l, g, dt, l32, g32)
				}
				if z > 1e-5*max(1, maxAbs(ref.logits)) || z32 <= 1e-4*max(1, maxAbs(ref.logits)) {
					t.Errorf("rank %d: logits %.3g from one device's %s ones, %.3g from its fp32 ones", r, z, dt, z32)
				}
			}
		})
	}
}

func maxAbs(x []float32) float64 {
	m := 0.0
	for _, v := range x {
		m = max(m, math.Abs(float64(v)))
	}
	return m
}
