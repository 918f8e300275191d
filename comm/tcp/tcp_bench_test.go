package tcp

import (
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"trellis/comm"
)

// BenchmarkAllReduce: two ranks on loopback (goroutines of this process,
// each with its own connections), fp32 sum. busbw = 2(p-1)/p · bytes / time.
//
//	go test ./comm/tcp -run XXX -bench AllReduce -benchtime 20x
func BenchmarkAllReduce(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10, 1 << 20, 64 << 20} {
		b.Run(fmt.Sprintf("p=2/%dKiB", size>>10), func(b *testing.B) {
			const p = 2
			gs := startWorld(b, p, 10*time.Second, nil)
			bufs := make([][]float32, p)
			for r := range bufs {
				bufs[r] = make([]float32, size/4)
			}
			b.SetBytes(int64(size))
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
			b.ReportMetric(float64(size)/sec/1e9*2*(p-1)/p, "busbw_GB/s")
		})
	}
}

// BenchmarkStream is the reference: one loopback TCP stream, 1 MiB writes.
func BenchmarkStream(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(io.Discard, c)
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 1<<20)
	b.SetBytes(int64(len(buf)))
	for i := 0; i < b.N; i++ {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(buf))*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}
