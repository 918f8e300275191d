package model

import (
	"testing"

	"trellis/internal/proctime"
	"trellis/ops"
)

// reference is the model of the PyTorch comparison in docs/BENCHMARKS.md.
var reference = Config{Layers: 4, Hidden: 256, Heads: 4, SeqLen: 256, Vocab: 512}

// BenchmarkForwardBackward times one forward and backward pass of a
// micro-batch of 8 sequences of the reference model (no optimizer step)
// and reports tokens/s and the achieved GFLOP/s by FLOPsPerToken.
//
//	go test ./model -run ^$ -bench ForwardBackward -benchtime 5x
func BenchmarkForwardBackward(b *testing.B) {
	for _, threads := range []int{1, 2} {
		b.Run(map[int]string{1: "threads=1", 2: "threads=2"}[threads], func(b *testing.B) {
			const B = 8
			m, p, s, _ := setup(b, reference, B, threads)
			batch := randomBatch(reference, B, 1)
			step := func() {
				if _, err := m.Forward(p, s, batch); err != nil {
					b.Fatal(err)
				}
				if err := m.Backward(p, s, 1); err != nil {
					b.Fatal(err)
				}
			}
			step() // warm up
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				step()
			}
			tokens := float64(B*reference.SeqLen) * float64(b.N)
			sec := b.Elapsed().Seconds()
			b.ReportMetric(tokens/sec, "tokens/s")
			b.ReportMetric(tokens*reference.FLOPsPerToken()/sec/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkTrainStep times a whole single-device training step of the
// reference model on one thread: zero the gradients, forward and backward
// of a micro-batch of 8 sequences, and an AdamW update of every
// parameter. It reports tokens/s and, less sensitive to other processes,
// the process's CPU milliseconds per step.
//
//	go test ./model -run ^$ -bench TrainStep -benchtime 20x -count 5
func BenchmarkTrainStep(b *testing.B) {
	const B = 8
	m, p, s, _ := setup(b, reference, B, 1)
	b.ReportAllocs()
	benchTrainSteps(b, m, p, s, B)
}

// benchTrainSteps times b.N optimizer steps (forward, backward, AdamW) of
// m on one random micro-batch of B, after one warm-up step, and reports
// tokens/s and CPU ms per step.
func benchTrainSteps(b *testing.B, m *GPT, p *FlatParams, s *Stash, B int) {
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
		p.Sync(m.k)                            // the weights' compute copy under a 16-bit policy
		if err := m.FP8Sync(nil); err != nil { // delayed scaling's step end
			b.Fatal(err)
		}
	}
	step(1) // warm up
	b.ResetTimer()
	cpu0 := proctime.CPU()
	for i := 0; i < b.N; i++ {
		step(i + 2)
	}
	cpu := proctime.CPU() - cpu0
	tokens := float64(B*reference.SeqLen) * float64(b.N)
	b.ReportMetric(tokens/b.Elapsed().Seconds(), "tokens/s")
	b.ReportMetric(cpu.Seconds()*1e3/float64(b.N), "cpu_ms/step")
}
