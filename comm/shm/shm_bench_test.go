package shm

import (
	"fmt"
	"sync"
	"testing"

	"trellis/comm"
)

// BenchmarkAllReduce: goroutine ranks of one process, each with its own
// mapping, fp32 sum of 64 MiB (the algorithm's cost without process
// scheduling; trellis bench comm --backend shm measures processes).
// busbw = 2(p-1)/p · bytes / time.
//
//	go test ./comm/shm -run '^$' -bench AllReduce -benchtime 10x
func BenchmarkAllReduce(b *testing.B) {
	for _, p := range []int{2, 4} {
		b.Run(fmt.Sprintf("p=%d/64MiB", p), func(b *testing.B) {
			const bytes = 64 << 20
			gs := startWorld(b, p, nil)
			bufs := make([][]float32, p)
			for r := range bufs {
				bufs[r] = make([]float32, bytes/4)
			}
			b.SetBytes(bytes)
			b.ResetTimer()
			var wg sync.WaitGroup
			for r := range gs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < b.N; i++ {
						if err := comm.AllReduce(gs[r], comm.F32(bufs[r]), comm.Sum); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			sec := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(float64(bytes)/sec/1e9*2*float64(p-1)/float64(p), "busbw_GB/s")
		})
	}
}
