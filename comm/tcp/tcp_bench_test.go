package tcp

import (
	"fmt"
	"net"
	"sort"
	"sync"
	"testing"
	"time"

	"trellis/comm"
	"trellis/internal/proctime"
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

// stream is one loopback TCP connection with a reader draining it in 1 MiB
// reads: the single-stream reference (as commbench.TCPStreamGBps).
type stream struct {
	w, r      net.Conn
	buf, rbuf []byte
}

func newStream(b *testing.B) *stream {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	w, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	s := &stream{w: w, r: <-acc, buf: make([]byte, 64<<20)}
	b.Cleanup(func() { s.w.Close(); s.r.Close() })
	return s
}

// copy moves n bytes and returns the seconds it took.
func (s *stream) copy(b *testing.B, n int) float64 {
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		var err error
		for sent := 0; sent < n && err == nil; sent += 1 << 20 {
			_, err = s.w.Write(s.buf[sent:min(sent+1<<20, n)])
		}
		done <- err
	}()
	if len(s.rbuf) < n {
		s.rbuf = make([]byte, n)
	}
	for got := 0; got < n; {
		k, err := s.r.Read(s.rbuf[got:min(got+1<<20, n)])
		if err != nil {
			b.Fatal(err)
		}
		got += k
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return time.Since(start).Seconds()
}

// BenchmarkAllReduceVsStream alternates a 64 MiB single-stream loopback
// copy with a 64 MiB two-rank all-reduce and reports the median ratio of
// the all-reduce's busbw (bytes/time for p=2) to the stream's bandwidth:
// the target is ≥ 0.5.
//
//	go test ./comm/tcp -run XXX -bench AllReduceVsStream -benchtime 10x -count 3
func BenchmarkAllReduceVsStream(b *testing.B) {
	const p, bytes = 2, 64 << 20
	gs := startWorld(b, p, 10*time.Second, func(r int, c *Config) { c.SocketBuffer = sockBuf })
	bufs := [][]float32{make([]float32, bytes/4), make([]float32, bytes/4)}
	allReduce := func() float64 {
		start := time.Now()
		var wg sync.WaitGroup
		for r := range gs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := comm.AllReduce(gs[r], comm.F32(bufs[r]), comm.Sum); err != nil {
					b.Error(err)
				}
			}()
		}
		wg.Wait()
		return time.Since(start).Seconds()
	}
	s := newStream(b)
	allReduce()
	s.copy(b, bytes)
	var ratios, str, bus, cpu []float64
	for i := 0; i < b.N; i++ {
		c0 := proctime.CPU()
		st := bytes / s.copy(b, bytes) / 1e9
		c1 := proctime.CPU()
		bb := bytes / allReduce() / 1e9 // busbw = 2(p-1)/p · bytes/time = bytes/time
		c2 := proctime.CPU()
		ratios, str, bus = append(ratios, bb/st), append(str, st), append(bus, bb)
		if c1 > c0 {
			cpu = append(cpu, float64(c2-c1)/float64(c1-c0))
		}
	}
	b.ReportMetric(median(ratios), "busbw/stream")
	b.ReportMetric(median(str), "stream_GB/s")
	b.ReportMetric(median(bus), "busbw_GB/s")
	if len(cpu) > 0 {
		// CPU time (user + system) of an all-reduce over that of a stream
		// copy of the same 64 MiB: on a CPU-bound host busbw/stream cannot
		// beat its inverse.
		b.ReportMetric(median(cpu), "cpu_allreduce/stream")
	}
}

var sockBuf = 0

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}
