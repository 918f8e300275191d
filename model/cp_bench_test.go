package model

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"trellis/comm/local"
	"trellis/precision"
)

// BenchmarkRingBalance times each rank's share of the ring attention —
// its blocks of one forward and one backward over every key/value block
// of the ring (the fastest of b.N rounds), one rank at a time on one thread, so ranks do not compete
// for cores — under the load-balanced causal split and the contiguous
// one, at cp = 4 (seq 1024, 4 heads of 32, B = 1): max/mean of the ranks'
// times and of their chunk pairs.
//
//	go test ./model -run '^$' -bench RingBalance -benchtime 3x
func BenchmarkRingBalance(b *testing.B) {
	cfg := Config{Layers: 1, Hidden: 128, Heads: 4, SeqLen: 1024, Vocab: 8}
	const n, B = 4, 1
	for _, contiguous := range []bool{false, true} {
		b.Run(fmt.Sprintf("contiguous=%v", contiguous), func(b *testing.B) {
			ms, _, _ := cpRanks(b, cfg, B, n, precision.FP32(), contiguous)
			d, T := ms[0].d, ms[0].T
			rnd := rand.New(rand.NewPCG(1, 2))
			fill := func(k int) []float32 {
				x := make([]float32, k)
				for i := range x {
					x[i] = float32(rnd.NormFloat64())
				}
				return x
			}
			qkv, kv := fill(B*T*d.qkvW()), fill(B*T*2*d.KVl)
			out, dout, dq, dkv := fill(B*T*d.Cl), fill(B*T*d.Cl), make([]float32, B*T*d.qkvW()), make([]float32, B*T*2*d.KVl)
			lse, mx, l := fill(B*d.NH*T), make([]float32, B*d.NH*T), make([]float32, B*d.NH*T)
			times := make([]time.Duration, n) // each rank's fastest round: the machine is shared
			for it := 0; it < b.N; it++ {
				for r, m := range ms {
					t0 := time.Now()
					for src := 0; src < n; src++ {
						m.ringBlockForward(out, mx, l, qkv, kv, src, B)
						m.ringBlockBackward(dq, dkv, dout, qkv, kv, lse, mx, src, B)
					}
					if d := time.Since(t0); it == 0 || d < times[r] {
						times[r] = d
					}
				}
			}
			var hi, sum time.Duration
			var phi, psum float64
			for r, m := range ms {
				hi, sum = max(hi, times[r]), sum+times[r]
				phi, psum = max(phi, m.RingWork().Pairs), psum+m.RingWork().Pairs
			}
			b.ReportMetric(float64(hi)/float64(sum/n), "max/mean-time")
			b.ReportMetric(phi/(psum/n), "max/mean-pairs")
			for r := range ms {
				b.ReportMetric(float64(times[r].Microseconds())/1e3, fmt.Sprintf("rank%d-ms", r))
			}
		})
	}
}

// BenchmarkRingOverlap runs one block's forward and backward at cp = 2
// (seq 1024, 4 heads of 32, B = 2) over an emulated link (latency 1 ms,
// the bandwidth given), in rounds that alternate the ring as built —
// each transfer posted before its step's compute — with a serial
// baseline that posts it after the compute. Per pass it reports the
// modelled transfer (every message's L + bytes/B), each variant's
// exposed wait on the cp group (the worse rank's Stats.Wait, the
// fastest round: the machine is shared) and the ring's compute.
//
//	go test ./model -run '^$' -bench RingOverlap -benchtime 6x
func BenchmarkRingOverlap(b *testing.B) {
	cfg := Config{Layers: 1, Hidden: 128, Heads: 4, SeqLen: 1024, Vocab: 64}
	const n, B = 2, 2
	for _, bw := range []float64{0, 0.25e9, 0.05e9, 0.02e9} {
		b.Run(fmt.Sprintf("bandwidth=%gGB/s", bw/1e9), func(b *testing.B) {
			lc := local.Config{Size: n}
			lat := time.Duration(0)
			if bw > 0 {
				lat = time.Millisecond
				lc.Link = &local.LinkModel{Intra: local.Link{Bandwidth: bw, Latency: lat}, Inter: local.Link{Bandwidth: bw, Latency: lat}}
			}
			ms, ps, ss := cpRanksOn(b, cfg, B, precision.FP32(), false, lc)
			batch := randomBatch(cfg, B, 3)
			best := [2]time.Duration{-1, -1}
			var comp time.Duration
			for it := 0; it < b.N; it++ {
				for v, serial := range []bool{false, true} {
					w0 := make([]time.Duration, n)
					for r, m := range ms {
						m.ringSerial = serial
						w0[r] = m.cp.Stats().Wait
					}
					c0 := ms[0].RingWork().Compute
					onRanks(b, n, func(r int) error {
						ps[r].ZeroGrads()
						if _, err := ms[r].Forward(ps[r], ss[r], cpBatch(b, batch, cfg.SeqLen, n, r)); err != nil {
							return err
						}
						return ms[r].Backward(ps[r], ss[r], 1)
					})
					var wait time.Duration
					for r, m := range ms {
						wait = max(wait, m.cp.Stats().Wait-w0[r])
					}
					if best[v] < 0 || wait < best[v] {
						best[v] = wait
					}
					if c := ms[0].RingWork().Compute - c0; it == 0 || c < comp {
						comp = c
					}
				}
			}
			// Per pass (forward + backward of the one layer): the forward
			// sends n−1 key/value blocks, the backward n−1 blocks and n sums.
			blk := float64(B * ms[0].T * 2 * ms[0].d.KVl * 4)
			var xfer float64
			if bw > 0 {
				xfer = float64(3*(n-1)+1) * (lat.Seconds() + blk/bw)
			}
			b.ReportMetric(xfer*1e3, "transfer-ms")
			b.ReportMetric(best[0].Seconds()*1e3, "exposed-overlap-ms")
			b.ReportMetric(best[1].Seconds()*1e3, "exposed-serial-ms")
			b.ReportMetric(comp.Seconds()*1e3, "compute-ms")
		})
	}
}
