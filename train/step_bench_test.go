package train

import (
	"log/slog"
	"testing"

	"trellis/comm/local"
	"trellis/data"
)

// BenchmarkTrainStep times one optimizer step (forward, backward, AdamW) of
// the reference model of docs/BENCHMARKS.md on one thread: layers 4, hidden
// 256, heads 4, seq 256, micro-batch 8, vocab 512, synthetic data.
func BenchmarkTrainStep(b *testing.B) {
	j := DefaultJob()
	j.Model.Layers, j.Model.Hidden, j.Model.Heads, j.Model.SeqLen, j.Model.Vocab = 4, 256, 4, 256, 512
	j.Parallel.Plan = "dp=1"
	j.Train.MicroBatch, j.Train.GlobalBatch, j.Train.Threads = 8, 8, 1
	j.Data.Source = data.SourceSynthetic
	s, err := j.resolve()
	if err != nil {
		b.Fatal(err)
	}
	loader, err := data.NewLoader(data.LoaderConfig{Data: j.Data, SeqLen: j.Model.SeqLen, Vocab: j.Model.Vocab, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	groups, err := local.New(local.Config{Size: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer groups[0].Close()
	r, err := newRank(rankConfig{job: j, set: s, world: groups[0], loader: loader, log: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer r.free()
	if err := r.st.Init(1); err != nil {
		b.Fatal(err)
	}
	var pos data.Position
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := r.step(i, pos); err != nil {
			b.Fatal(err)
		}
		pos = pos.Advance(j.Train.GlobalBatch)
	}
	b.ReportMetric(float64(b.N*j.Train.GlobalBatch*j.Model.SeqLen)/b.Elapsed().Seconds(), "tokens/s")
}
