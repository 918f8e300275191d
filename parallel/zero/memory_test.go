package zero

import (
	"math"
	"testing"

	"trellis/device"
	pt "trellis/parallel/dptest"
)

// Measured per-rank memory after training steps: param, grad and optim
// exactly as Shape.Memory accounts them, within 2% of ZeRO's formulas
// (4Ψ+4Ψ+8Ψ/N, 4Ψ+4Ψ/N+8Ψ/N, 4Ψ/N+4Ψ/N+8Ψ/N), and the communication
// buffers within their documented bound (at it within 2% for stage 2).
func TestMemoryMatchesZeROAccounting(t *testing.T) {
	psi := float64(pt.Tiny.NumParams())
	cases := []struct {
		stage, ranks, bucket int
		overlap              bool
	}{
		{1, 2, 0, true}, {1, 4, 900, true},
		{2, 2, 0, true}, {2, 4, 900, true}, {2, 4, 0, false},
		{3, 2, 0, true}, {3, 4, 900, true}, {3, 4, 1 << 20, false},
	}
	for _, c := range cases {
		j := pt.Job{Model: pt.Tiny, Ranks: c.ranks, MB: 1, Global: 2 * c.ranks, Steps: 2}
		out := j.Run(t, build(Config{Model: pt.Tiny, Stage: c.stage, BucketElems: c.bucket, Overlap: c.overlap, Prefetch: true}))
		n := float64(c.ranks)
		formula := map[int][3]float64{
			1: {4 * psi, 4 * psi, 8 * psi / n},
			2: {4 * psi, 4 * psi / n, 8 * psi / n},
			3: {4 * psi / n, 4 * psi / n, 8 * psi / n},
		}[c.stage]
		for r, dev := range out.Devs {
			want, err := Shape{Layout: pt.Tiny.Layout(), Stage: c.stage, Ranks: c.ranks, Rank: r, BucketElems: c.bucket, Overlap: c.overlap, Accum: 2}.Memory()
			if err != nil {
				t.Fatal(err)
			}
			st := dev.Stats()
			got := [3]int64{st.Peak[device.Param], st.Peak[device.Grad], st.Peak[device.Optim]}
			exact := [3]int64{want.Param, want.Grad, want.Optim}
			for i, tag := range []string{"param", "grad", "optim"} {
				if got[i] != exact[i] {
					t.Errorf("stage %d, %d ranks, rank %d: %s peak %d bytes, accounted %d", c.stage, c.ranks, r, tag, got[i], exact[i])
				}
				if math.Abs(float64(got[i])-formula[i]) > 0.02*formula[i] {
					t.Errorf("stage %d, %d ranks, rank %d: %s %d bytes, ZeRO's formula %.0f", c.stage, c.ranks, r, tag, got[i], formula[i])
				}
			}
			cm := st.Peak[device.Comm]
			if cm > want.Comm || (c.stage >= 2 && cm == 0) {
				t.Errorf("stage %d, %d ranks, rank %d: comm peak %d bytes, bound %d", c.stage, c.ranks, r, cm, want.Comm)
			}
			// Stage 2 reaps its reductions at fixed points of the schedule:
			// the bound is the peak (within the odd bucket sizes).
			if c.stage == 2 && float64(cm) < 0.98*float64(want.Comm) {
				t.Errorf("stage %d, %d ranks, rank %d: comm peak %d bytes, more than 2%% under the accounted %d", c.stage, c.ranks, r, cm, want.Comm)
			}
			if st.Live[device.Comm] != 0 {
				t.Errorf("stage %d, %d ranks, rank %d: %d comm bytes still live after the run", c.stage, c.ranks, r, st.Live[device.Comm])
			}
		}
	}
}
