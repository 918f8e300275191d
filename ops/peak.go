package ops

import (
	"sync"
	"time"
)

// PeakGFLOPS measures the fp32 FMA throughput of isa ("auto", "avx512",
// "avx2" or "generic"; "" means auto) on threads goroutines for about d: a
// loop of independent vector FMAs from the same generator as the matmul
// micro-kernels, flops counted 2 per lane per FMA. It is the denominator of
// MFU. It returns 0 if the CPU lacks isa.
func PeakGFLOPS(isa string, threads int, d time.Duration) float64 {
	g, err := resolveISA(isa)
	if err != nil {
		return 0
	}
	return peakGFLOPS(g, max(threads, 1), d)
}

// PeakGFLOPS measures the FMA peak of k's ISA on k.Threads() goroutines for
// about d; see the package function PeakGFLOPS.
func (k *Kernels) PeakGFLOPS(d time.Duration) float64 {
	return peakGFLOPS(k.impl, k.threads, d)
}

// peakGFLOPS runs g's FMA loop on t goroutines at once for about d and
// returns the best rate of 5 rounds of the summed flops over the round's
// wall time.
func peakGFLOPS(g *gemmImpl, t int, d time.Duration) float64 {
	iters := 1 << 12
	for { // calibrate: one call of about d/10
		start := time.Now()
		g.peak(iters)
		if el := time.Since(start); el > d/10 || iters > 1<<30 {
			break
		}
		iters *= 2
	}
	best := 0.0
	for r := 0; r < 5; r++ {
		var wg sync.WaitGroup
		start := time.Now()
		for w := 0; w < t; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g.peak(iters)
			}()
		}
		wg.Wait()
		el := time.Since(start).Seconds()
		best = max(best, float64(t)*float64(iters)*float64(g.peakFlops)/el/1e9)
	}
	return best
}
