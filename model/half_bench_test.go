package model

import (
	"testing"

	"trellis/precision"
)

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

// BenchmarkTrainStepFP8 is BenchmarkTrainStepPrecision's step in bf16 and
// in fp8 under both recipes (DeepSeek-V3's 128 tiles), side by side, for
// docs/BENCHMARKS.md:
//
//	go test ./model -run ^$ -bench TrainStepFP8 -benchtime 10x -count 3
func BenchmarkTrainStepFP8(b *testing.B) {
	for _, pol := range []precision.Policy{precision.BF16(), precision.FP8(precision.DefaultFP8(precision.Delayed)), precision.FP8(precision.DefaultFP8(precision.Blockwise))} {
		name := pol.String()
		if pol.F8.Recipe != precision.NoFP8 {
			name += "-" + pol.F8.Recipe.String()
		}
		b.Run(name, func(b *testing.B) {
			const B = 8
			m, p, s, _ := setupOn(b, reference, B, 1, Options{Precision: pol})
			benchTrainSteps(b, m, p, s, B)
		})
	}
}
