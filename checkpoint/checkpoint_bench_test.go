package checkpoint

import (
	"testing"
	"time"
)

// BenchmarkSaveOpen saves 4 ranks × 8 MiB of fp32 shards (written by four
// goroutines, committed by one) and opens the result with full verification;
// it reports the checkpoint bytes per second of each phase.
func BenchmarkSaveOpen(b *testing.B) {
	const world, perRank = 4, 2 << 20 // elements
	vals := make([]float32, perRank)
	for i := range vals {
		vals[i] = float32(i)
	}
	shape := []int{world * perRank}
	s, err := New(Config{Dir: b.TempDir(), Keep: 1})
	if err != nil {
		b.Fatal(err)
	}
	var saveNs, openNs int64
	for i := 0; i < b.N; i++ {
		t0 := nowNs()
		done := make(chan error, world)
		for r := 0; r < world; r++ {
			go func(r int) {
				done <- s.WriteRank(i, r, world, []Shard{Float32Shard("flat", shape, int64(r*perRank), vals)})
			}(r)
		}
		for r := 0; r < world; r++ {
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		}
		if _, err := s.Commit(Manifest{Step: i, World: world}); err != nil {
			b.Fatal(err)
		}
		t1 := nowNs()
		if _, err := Open(s.Config().Dir); err != nil {
			b.Fatal(err)
		}
		saveNs += t1 - t0
		openNs += nowNs() - t1
	}
	bytes := float64(world*perRank*4) * float64(b.N)
	b.ReportMetric(bytes/float64(saveNs)*1e3, "save_MB/s")
	b.ReportMetric(bytes/float64(openNs)*1e3, "open_MB/s")
}

func nowNs() int64 { return time.Now().UnixNano() }
