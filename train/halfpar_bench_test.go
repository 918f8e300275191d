package train

import "testing"

// BenchmarkHalfParallel: tokens/s of bf16 against fp32 under tp=2 and
// under pp=2 (1F1B, 4 micro-batches), one kernel thread per rank, on a
// compute-bound model (4 layers, hidden 512, 8 heads, micro-batch 2);
// median of 5 alternating runs of 6 steps each.
//
//	flock /tmp/bench.lock go test ./train -run '^$' -bench HalfParallel -benchtime 1x
func BenchmarkHalfParallel(b *testing.B) {
	const reps = 5
	plans := []string{"tp=2", "tp=2,precision=bf16", "pp=2", "pp=2,precision=bf16"}
	names := []string{"tp2_fp32", "tp2_bf16", "pp2_fp32", "pp2_bf16"}
	for i := 0; i < b.N; i++ {
		tps := make([][]float64, len(plans))
		for rep := 0; rep < reps; rep++ {
			for k, p := range plans {
				j := benchJob(p, 4, 2, 8, 6)
				j.Model.Hidden, j.Model.Heads = 512, 8
				tps[k] = append(tps[k], runBench(b, j).TokensPerSec)
			}
		}
		for k, n := range names {
			b.ReportMetric(median(tps[k]), n+"_tokens/s")
		}
		b.ReportMetric(median(tps[1])/median(tps[0]), "tp2_bf16/fp32")
		b.ReportMetric(median(tps[3])/median(tps[2]), "pp2_bf16/fp32")
	}
}
