package model

import "testing"

// BenchmarkTrainStepPrecision is BenchmarkTrainStep (the reference model,
// B = 8, one thread, forward + backward + AdamW) in fp32, bf16 and fp16,
// side by side in one run, for docs/BENCHMARKS.md:
//
//	go test ./model -run ^$ -bench TrainStepPrecision -benchtime 10x -count 3
func BenchmarkTrainStepPrecision(b *testing.B) {
	for _, pol := range policies {
		b.Run(pol.String(), func(b *testing.B) {
			const B = 8
			m, p, s, _ := setupOn(b, reference, B, 1, Options{Precision: pol})
			benchTrainSteps(b, m, p, s, B)
		})
	}
}
