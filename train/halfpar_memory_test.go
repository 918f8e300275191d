package train

import "testing"

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
