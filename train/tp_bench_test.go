package train

import "testing"

// BenchmarkTPScaling: tokens/s of tp=2 (one kernel thread per rank), tp=2
// with sp, and tp=1 with one and with two kernel threads, on a
// compute-bound model (2 layers, hidden 512, 8 heads, T 128, vocabulary
// 256, micro-batch 4); median of 5 alternating runs of 8 steps each.
//
//	go test ./train -run '^$' -bench TPScaling -benchtime 1x
func BenchmarkTPScaling(b *testing.B) {
	const reps = 5
	runs := []struct {
		name, plan string
		threads    int
	}{{"tp1_t1", "dp=1", 1}, {"tp1_t2", "dp=1", 2}, {"tp2", "tp=2", 1}, {"tp2_sp", "tp=2,sp=on", 1}}
	for i := 0; i < b.N; i++ {
		tps := make([][]float64, len(runs))
		for rep := 0; rep < reps; rep++ {
			for k, r := range runs {
				j := benchJob(r.plan, 2, 4, 4, 8)
				j.Model.Hidden, j.Model.Heads = 512, 8
				j.Train.Threads = r.threads
				tps[k] = append(tps[k], runBench(b, j).TokensPerSec)
			}
		}
		for k, r := range runs {
			b.ReportMetric(median(tps[k]), r.name+"_tokens/s")
		}
		b.ReportMetric(median(tps[2])/median(tps[0]), "tp2/tp1_t1")
		b.ReportMetric(median(tps[2])/median(tps[1]), "tp2/tp1_t2")
	}
}
