package train

import (
	"testing"
	"time"

	"trellis/internal/proctime"
)

// BenchmarkHalfParallel: bf16 against fp32 under tp=2 and under pp=2
// (1F1B, 4 micro-batches), one kernel thread per rank, on a compute-bound
// model (4 layers, hidden 512, 8 heads, seq 128, micro-batch 2); medians
// of 5 alternating runs of 6 steps each: wall-clock tokens/s and the
// process's CPU milliseconds per step (both ranks), the steadier measure
// on a loaded machine.
//
//	flock /tmp/bench.lock go test ./train -run '^$' -bench HalfParallel -benchtime 1x
func BenchmarkHalfParallel(b *testing.B) {
	const reps, steps = 5, 6
	plans := []string{"tp=2", "tp=2,precision=bf16", "pp=2", "pp=2,precision=bf16"}
	names := []string{"tp2_fp32", "tp2_bf16", "pp2_fp32", "pp2_bf16"}
	for i := 0; i < b.N; i++ {
		tps, cpu := make([][]float64, len(plans)), make([][]float64, len(plans))
		for rep := 0; rep < reps; rep++ {
			for k, p := range plans {
				j := benchJob(p, 4, 2, 8, steps)
				j.Model.Hidden, j.Model.Heads = 512, 8
				c0 := proctime.CPU()
				tps[k] = append(tps[k], runBench(b, j).TokensPerSec)
				cpu[k] = append(cpu[k], float64(proctime.CPU()-c0)/float64(time.Millisecond)/steps)
			}
		}
		for k, n := range names {
			b.ReportMetric(median(tps[k]), n+"_tokens/s")
			b.ReportMetric(median(cpu[k]), n+"_cpu_ms/step")
		}
		b.ReportMetric(median(tps[1])/median(tps[0]), "tp2_bf16/fp32_tokens")
		b.ReportMetric(median(tps[3])/median(tps[2]), "pp2_bf16/fp32_tokens")
		b.ReportMetric(median(cpu[0])/median(cpu[1]), "tp2_fp32/bf16_cpu")
		b.ReportMetric(median(cpu[2])/median(cpu[3]), "pp2_fp32/bf16_cpu")
	}
}
