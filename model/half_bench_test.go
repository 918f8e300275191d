package model

import (
	"testing"

	"trellis/ops"
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
			m, p, s, _ := setup(b, reference, B, 1)
			if dt != tensor.F32 {
				m, p, s, _ = setupHalfOf(b, reference, B, 1, dt)
			}
			batch := randomBatch(reference, B, 1)
			mom, vel := make([]float32, len(p.W)), make([]float32, len(p.W))
			h := ops.AdamWHyper{LR: 1e-4, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, GradScale: 1}
			step := func(t int) {
				p.ZeroGrads()
				if _, err := m.Forward(p, s, batch); err != nil {
					b.Fatal(err)
				}
				if err := m.Backward(p, s, 1); err != nil {
					b.Fatal(err)
				}
				h.Step = t
				m.k.AdamW(h, p.W, p.G, mom, vel)
			}
			step(1)
			b.ResetTimer()
			cpu0 := cpuTime()
			for i := 0; i < b.N; i++ {
				step(i + 2)
			}
			cpu := cpuTime() - cpu0
			tokens := float64(B*reference.SeqLen) * float64(b.N)
			b.ReportMetric(tokens/b.Elapsed().Seconds(), "tokens/s")
			b.ReportMetric(cpu.Seconds()*1e3/float64(b.N), "cpu_ms/step")
		})
	}
}
