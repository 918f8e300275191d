package train

import (
	"fmt"
	"math"
	"testing"

	"trellis/device"
)

// Every plan dp ∈ {1,2,4} × zero ∈ {0,1,2,3}, with gradient accumulation
// (micro-batch 1: 8, 4 or 2 micro-batches per step) and without (dp=4,
// micro-batch 2), trains the single device's model: per-step losses within
// 1e-5 relative over 5 steps, and final weights and Adam moments within
// 1e-5 in relative L2 (see dptest.CloseTo for why not elementwise).
func TestPlansMatchSingleDevice(t *testing.T) {
	ref := runJob(t, tinyJob("dp=1"), t.TempDir(), "", 0)
	if ref.losses[len(ref.losses)-1] >= ref.losses[0] {
		t.Fatalf("the reference does not learn: losses %v", ref.losses)
	}
	for _, dp := range []int{1, 2, 4} {
		for zero := 0; zero <= 3; zero++ {
			for _, mb := range []int{2, 1} {
				if (dp == 1 && zero == 0 && mb == 2) || (mb == 2 && dp != 4) {
					continue
				}
				plan := fmt.Sprintf("dp=%d,zero=%d", dp, zero)
				t.Run(fmt.Sprintf("%s/mb%d", plan, mb), func(t *testing.T) {
					j := tinyJob(plan)
					j.Train.MicroBatch = mb
					j.Parallel.Overlap = (dp+zero)%2 == 0
					got := runJob(t, j, t.TempDir(), "", 0)
					if len(got.losses) != len(ref.losses) {
						t.Fatalf("%d steps logged, want %d", len(got.losses), len(ref.losses))
					}
					for s := range ref.losses {
						if math.Abs(got.losses[s]-ref.losses[s]) > 1e-5*ref.losses[s] {
							t.Errorf("step %d: loss %.9g, want %.9g", s+1, got.losses[s], ref.losses[s])
						}
					}
					for _, x := range []struct {
						what      string
						got, want []float32
					}{{"weights", got.w, ref.w}, {"first moments", got.m, ref.m}, {"second moments", got.v, ref.v}} {
						if e := relL2(x.got, x.want); !(e <= 1e-5) {
							t.Errorf("%s: relative L2 error %.3g", x.what, e)
						}
					}
					if n := len(got.sum.Ranks); n != dp {
						t.Errorf("%d ranks reported, want %d", n, dp)
					}
				})
			}
		}
	}
}

// Under every ZeRO stage, a run split by --until and resumed equals the
// straight run bit for bit: losses, weights and Adam moments.
func TestResumeBitIdenticalUnderZeRO(t *testing.T) {
	for _, plan := range []string{"dp=2", "dp=2,zero=1", "dp=2,zero=2", "dp=4,zero=3"} {
		t.Run(plan, func(t *testing.T) {
			j := tinyJob(plan)
			j.Train.Steps = 6
			a := runJob(t, j, t.TempDir(), "", 0)
			dir := t.TempDir()
			b1 := runJob(t, j, dir, "", 3)
			b2 := runJob(t, j, dir, dir, 0)
			got := append(append([]float64{}, b1.losses...), b2.losses...)
			if len(got) != len(a.losses) {
				t.Fatalf("%d + %d steps, want %d", len(b1.losses), len(b2.losses), len(a.losses))
			}
			for s := range a.losses {
				if got[s] != a.losses[s] {
					t.Errorf("step %d: loss %v (split) vs %v (straight)", s+1, got[s], a.losses[s])
				}
			}
			for _, x := range []struct {
				what string
				a, b []float32
			}{{"weights", a.w, b2.w}, {"first moments", a.m, b2.m}, {"second moments", a.v, b2.v}} {
				if err := sameBits(x.b, x.a); err != nil {
					t.Errorf("%s: %v", x.what, err)
				}
			}
		})
	}
}

// The per-rank peaks the run reports hold ZeRO's accounting within 2%:
// param+grad+optim = 16Ψ, 8Ψ+8Ψ/N, 4Ψ+12Ψ/N, 16Ψ/N per tag, and the
// communication buffers within the bound zero.Shape.Memory documents
// (none for data parallelism and ZeRO-1, which reduce in place).
func TestReportedMemoryMatchesZeRO(t *testing.T) {
	const n = 4
	j := tinyJob("")
	psi := float64(j.Model.NumParams())
	for zero, want := range [][3]float64{
		{4 * psi, 4 * psi, 8 * psi},
		{4 * psi, 4 * psi, 8 * psi / n},
		{4 * psi, 4 * psi / n, 8 * psi / n},
		{4 * psi / n, 4 * psi / n, 8 * psi / n},
	} {
		j := tinyJob(fmt.Sprintf("dp=%d,zero=%d", n, zero))
		j.Train.Steps = 2
		got := runJob(t, j, "", "", 0)
		bound := commBound(t, j, zero, n)
		for _, r := range got.sum.Ranks {
			for i, tag := range []device.Tag{device.Param, device.Grad, device.Optim} {
				if d := math.Abs(float64(r.Peak[tag]) - want[i]); d > 0.02*want[i] {
					t.Errorf("zero=%d rank %d: %s peak %d bytes, ZeRO's formula %.0f", zero, r.Rank, tag, r.Peak[tag], want[i])
				}
			}
			if c := r.Peak[device.Comm]; c > bound || (zero >= 2) != (c > 0) {
				t.Errorf("zero=%d rank %d: comm peak %d bytes, documented bound %d", zero, r.Rank, c, bound)
			}
		}
	}
}
