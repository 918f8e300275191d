package tcp

import (
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"sync"
	"testing"
	"time"

	"trellis/comm"
	"trellis/internal/proctime"
)

// BenchmarkFrameTag: the cost of authenticating one 1 MiB frame (a piece),
// with the AES-GCM tag Trellis uses and with HMAC-SHA256, the alternative.
//
//	go test ./comm/tcp -run XXX -bench FrameTag
func BenchmarkFrameTag(b *testing.B) {
	hdr, payload := make([]byte, headerSize), make([]byte, pieceBytes)
	b.Run("aes-gcm", func(b *testing.B) {
		f := newFramer(make([]byte, 16))
		b.SetBytes(pieceBytes)
		for b.Loop() {
			f.tag(hdr, payload)
		}
	})
	b.Run("hmac-sha256", func(b *testing.B) {
		m := hmac.New(sha256.New, make([]byte, 32))
		var sum [sha256.Size]byte
		b.SetBytes(pieceBytes)
		for b.Loop() {
			m.Reset()
			m.Write(hdr)
			m.Write(payload)
			m.Sum(sum[:0])
		}
	})
}

// BenchmarkAllReduceAuth: a 64 MiB fp32 all-reduce with 2 and 4 ranks on
// loopback, frames authenticated and plain (the default), side by side: the
// wall time (busbw) and the CPU time all ranks spent per all-reduce.
//
//	go test ./comm/tcp -run XXX -bench AllReduceAuth -benchtime 10x -count 3
func BenchmarkAllReduceAuth(b *testing.B) {
	const size = 64 << 20
	for _, p := range []int{2, 4} {
		for _, plain := range []bool{false, true} {
			mode := map[bool]string{false: "auth", true: "plain"}[plain]
			b.Run(fmt.Sprintf("p=%d/%s", p, mode), func(b *testing.B) {
				gs := startWorld(b, p, 30*time.Second, func(r int, c *Config) { c.FrameAuth = !plain })
				bufs := make([][]float32, p)
				for r := range bufs {
					bufs[r] = make([]float32, size/4)
				}
				b.SetBytes(size)
				b.ResetTimer()
				cpu0 := proctime.CPU()
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
				// CPU time per all-reduce over all ranks: robust to a busy machine,
				// where wall time also counts other processes.
				b.ReportMetric((proctime.CPU()-cpu0).Seconds()*1e3/float64(b.N), "cpu_ms/op")
				sec := b.Elapsed().Seconds() / float64(b.N)
				b.ReportMetric(float64(size)/sec/1e9*2*float64(p-1)/float64(p), "busbw_GB/s")
			})
		}
	}
}
