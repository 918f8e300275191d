package ops

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkAdamW measures the update over 4M parameters (about the
// reference model's size) in parameters per second.
func BenchmarkAdamW(b *testing.B) {
	const n = 1 << 22
	r := rand.New(rand.NewPCG(1, 2))
	p, g := randVec(r, n, 1), randVec(r, n, 0.01)
	m, v := make([]float32, n), make([]float32, n)
	for _, threads := range []int{1, 2} {
		k, err := New(Config{Threads: threads, ISA: "generic"})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(map[int]string{1: "threads=1", 2: "threads=2"}[threads], func(b *testing.B) {
			h := AdamWHyper{LR: 1e-4, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, GradScale: 1}
			b.SetBytes(4 * 4 * n) // p, g, m, v read; p, m, v written
			for i := 0; i < b.N; i++ {
				h.Step = i + 1
				k.AdamW(h, p, g, m, v)
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mparams/s")
		})
	}
}
