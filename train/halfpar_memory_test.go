package train

import (
	"strings"
	"testing"

	"trellis/device"
)

// halfParMemoryGrid is the 16-bit plans whose per-rank, per-tag peaks the
// planner's engine store must predict: one device and ZeRO-3 (the 16-bit
// GEMM scratch in workspace, the per-unit copy), tensor parallelism with
// and without sequence parallelism, the pipeline schedules and the 3D plan.
var halfParMemoryGrid = []string{
	"precision=bf16", "dp=2,zero=3,precision=fp16",
	"tp=2,precision=bf16", "tp=2,sp=on,precision=fp16", "dp=2,tp=2,zero=3,precision=bf16",
	"pp=2,precision=bf16", "pp=2,schedule=zb-h1,precision=fp16", "pp=2,schedule=interleaved,vpp=2,precision=bf16",
	"pp=2,tp=2,dp=2,zero=1,precision=bf16", "pp=2,tp=2,dp=2,zero=1,precision=fp16", "pp=2,tp=2,sp=on,precision=fp16",
}

// TestHalfParallelMemoryPredicted holds every rank's measured peak, and
// every tag's above 4 KiB, to the planner's prediction within 5% on the
// 16-bit plans (holdPredicted, TestPredictedMemoryMatchesMeasured's rules).
func TestHalfParallelMemoryPredicted(t *testing.T) {
	for _, p := range halfParMemoryGrid {
		t.Run(p, func(t *testing.T) {
			j := tinyJob(p)
			j.Model.Layers = 4
			holdPredicted(t, j)
		})
	}
}

// TestHalfStashUnderTP: under tp=2 (± sp) a bf16 or fp16 rank keeps its
// slices of the stash in 16-bit (model/tp16.go): every rank's act peak is
// the fp32 plan's less 2 of the 4 bytes of each layer's ln1 and ln2 (n·C
// each, n = B·T, B·T/t with sp), qkv, atty, fc and GELU(fc) (12·B·T·C/t)
// and of ln_f (n·C), which is what the planner predicts too (bf16).
func TestHalfStashUnderTP(t *testing.T) {
	for _, base := range []string{"tp=2", "tp=2,sp=on"} {
		for _, prec := range []string{"bf16", "fp16"} {
			mk := func(p string) Job {
				j := tinyJob(base + ",precision=" + p)
				j.Train.Steps = 1
				return j
			}
			j32, j16 := mk("fp32"), mk(prec)
			a32, a16 := runJob(t, j32, "", "", 0), runJob(t, j16, "", "", 0)
			c := j16.Model
			const tp = 2
			BT := int64(j16.Train.MicroBatch * c.SeqLen)
			C, L, n := int64(c.Hidden), int64(c.Layers), BT
			if strings.Contains(base, "sp=on") {
				n = BT / tp
			}
			saving := 2 * (L*(2*n*C+12*BT*C/tp) + n*C)
			for i, r := range a16.sum.Ranks {
				got, f32 := r.Peak[device.Act], a32.sum.Ranks[i].Peak[device.Act]
				if i == 0 {
					t.Logf("%s,precision=%s: act %d bytes, fp32 %d", base, prec, got, f32)
				}
				if f32-got != saving {
					t.Errorf("%s,precision=%s rank %d: act %d bytes, fp32 %d: saves %d, want %d", base, prec, r.Rank, got, f32, f32-got, saving)
				}
			}
			if prec == "fp16" {
				continue // the CPU host cluster file has no fp16 peak to plan with
			}
			if p32, p16 := plannedAct(t, j32), plannedAct(t, j16); p32-p16 != saving {
				t.Errorf("%s,precision=%s: the planner predicts act %d bytes, fp32 %d: saves %d, want %d", base, prec, p16, p32, p32-p16, saving)
			}
		}
	}
}
