package model

import (
	"math"
	"testing"
	"time"

	"trellis/ops"
)

// BenchmarkTrainStepFlash times whole training steps of the reference
// model (T=256, 4 heads of 64, micro-batch 8, one thread) with the
// materialising attention and with flash attention, alternately, and
// reports each one's best step time and tokens/s and the ratio
// speedup = materialising / flash step time.
//
//	go test ./model -run '^$' -bench TrainStepFlash -benchtime 10x -count 3
func BenchmarkTrainStepFlash(b *testing.B) {
	const B = 8
	type run struct {
		m    *GPT
		p    *FlatParams
		s    *Stash
		mom  []float32
		vel  []float32
		best float64
	}
	var runs [2]*run
	for i, flash := range []bool{false, true} {
		m, p, s, _ := setupOn(b, reference, B, 1, Options{Flash: flash})
		runs[i] = &run{m: m, p: p, s: s, mom: make([]float32, len(p.W)), vel: make([]float32, len(p.W)), best: math.Inf(1)}
	}
	batch := randomBatch(reference, B, 1)
	h := ops.AdamWHyper{LR: 1e-4, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, GradScale: 1}
	step := func(r *run, t int) float64 {
		t0 := time.Now()
		r.p.ZeroGrads()
		if _, err := r.m.Forward(r.p, r.s, batch); err != nil {
			b.Fatal(err)
		}
		if err := r.m.Backward(r.p, r.s, 1); err != nil {
			b.Fatal(err)
		}
		h.Step = t
		r.m.k.AdamW(h, r.p.W, r.p.G, r.mom, r.vel)
		return time.Since(t0).Seconds()
	}
	for _, r := range runs {
		step(r, 1) // warm up
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, r := range runs {
			r.best = min(r.best, step(r, i+2))
		}
	}
	tokens := float64(B * reference.SeqLen)
	b.ReportMetric(runs[0].best*1e3, "naive_ms/step")
	b.ReportMetric(runs[1].best*1e3, "flash_ms/step")
	b.ReportMetric(tokens/runs[0].best, "naive_tokens/s")
	b.ReportMetric(tokens/runs[1].best, "flash_tokens/s")
	b.ReportMetric(runs[0].best/runs[1].best, "speedup")
}
