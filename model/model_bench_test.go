package model

import (
	"testing"
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
