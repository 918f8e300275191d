package model

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"trellis/ops"
)

// referenceLlama is the Llama of docs/BENCHMARKS.md's comparison with the
// GPT-2 reference: the same width, depth, heads, sequence and vocabulary
// (L = 4, C = 256, 4 heads, T = 256, V = 512), 4 query heads on 1
// key/value head (4:1, as examples/llama.toml), Llama's SwiGLU width for
// C = 256 (768), the untied head.
var referenceLlama = Config{Arch: "llama", Layers: 4, Hidden: 256, Heads: 4, KVHeads: 1, FFN: 768, SeqLen: 256, Vocab: 512}

// BenchmarkLlamaVsGPT2 trains the two references side by side on one
// thread (each step: zero the gradients, forward and backward of 8
// sequences, AdamW), alternating rounds of 3 steps of each, and reports
// each one's model-FLOPs rate (FLOPsPerToken · tokens/s) and the median
// over rounds of the ratio Llama / GPT-2, which other load on the machine
// moves less than either rate. Pin it to one core:
//
//	taskset -c 0 go test ./model -run ^$ -bench LlamaVsGPT2 -benchtime 10x
func BenchmarkLlamaVsGPT2(b *testing.B) {
	const B, steps = 8, 3
	type run struct {
		name string
		cfg  Config
		step func(int)
	}
	var runs []run
	for _, c := range []struct {
		name string
		cfg  Config
	}{{"gpt2", reference}, {"llama", referenceLlama}} {
		m, p, s, _ := setup(b, c.cfg, B, 1)
		batch := randomBatch(c.cfg, B, 1)
		mom, vel := make([]float32, len(p.W)), make([]float32, len(p.W))
		runs = append(runs, run{c.name, c.cfg, func(t int) {
			defer m.pin()()
			p.ZeroGrads()
			if _, err := m.Forward(p, s, batch); err != nil {
				b.Fatal(err)
			}
			if err := m.Backward(p, s, 1); err != nil {
				b.Fatal(err)
			}
			m.k.AdamW(adamHyper(t), p.W, p.G, mom, vel)
		}})
	}
	for _, r := range runs {
		r.step(1) // warm up
	}
	rates := make([][]float64, len(runs))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k, r := range runs {
			t0 := time.Now()
			for s := range steps {
				r.step(2 + i*steps + s)
			}
			sec := time.Since(t0).Seconds()
			rates[k] = append(rates[k], float64(steps*B*r.cfg.SeqLen)*r.cfg.FLOPsPerToken()/sec/1e9)
		}
	}
	ratios := make([]float64, b.N)
	for i := range ratios {
		ratios[i] = rates[1][i] / rates[0][i]
	}
	b.ReportMetric(median(rates[0]), "gpt2_GFLOP/s")
	b.ReportMetric(median(rates[1]), "llama_GFLOP/s")
	b.ReportMetric(median(ratios), "llama/gpt2")
	if testing.Verbose() {
		fmt.Printf("ratios %.3f\n", ratios)
	}
}

func median(x []float64) float64 {
	x = slices.Clone(x)
	slices.Sort(x)
	if len(x) == 0 {
		return 0
	}
	return x[len(x)/2]
}

// adamHyper is the benchmarks' AdamW at step t.
func adamHyper(t int) ops.AdamWHyper {
	return ops.AdamWHyper{LR: 1e-4, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, GradScale: 1, Step: t}
}
