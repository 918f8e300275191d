package model

import (
	"testing"

	"trellis/device"

	"trellis/tensor"
)

// BenchmarkTrainStepPrecision is BenchmarkTrainStep (the reference model,
// B = 8, one thread, forward + backward + AdamW) in fp32, bf16 and fp16,
// side by side in one run, for docs/BENCHMARKS.md:
//
//	go test ./model -run ^$ -bench TrainStepPrecision -benchtime 10x -count 3
func BenchmarkTrainStepPrecision(b *testing.B) {
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.F16} {
		b.Run(dt.String(), func(b *testing.B) {
			const B = 8
			setupFor := setup
			if dt != tensor.F32 {
				setupFor = func(t testing.TB, cfg Config, B, threads int) (*GPT, *FlatParams, *Stash, *device.Device) {
					return setupHalfOf(t, cfg, B, threads, dt)
				}
			}
			m, p, s, _ := setupFor(b, reference, B, 1)
			benchTrainSteps(b, m, p, s, B)
		})
	}
}
