package profile

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"trellis/ops"
)

// CoreSample is the aggregate GEMM rate of Ranks goroutines, each with its
// own one-thread kernels, multiplying at once: what the engine's ranks get
// when they compute together on this host.
type CoreSample struct {
	Ranks  int
	GFLOPs float64 // all of them together
}

// coreShape is the product timed: one of a small model's layer GEMMs
// (256 tokens, h = 128, the MLP's 4h), cache-resident on every core.
func coreShape() GEMMSample { return GEMMSample{M: 256, N: 512, K: 128} }

// measureCores times 1, 2, ..., cores+1 concurrent single-thread GEMM loops
// (one past the cores shows that oversubscribing them adds nothing): the
// best of several rounds for each count. Run measures twice, at its start
// and at its end, and keeps the better.
func measureCores(ctx context.Context, c Config, cores int, progress func(int, int)) ([]CoreSample, error) {
	round := 60 * time.Millisecond
	rounds := 7
	if c.Quick {
		round, rounds = 30*time.Millisecond, 8
	}
	return coreRates(ctx, c, cores+1, round, rounds, progress)
}

// SpeedupNow measures the cores' speedup in about 4·round (1 and cores
// concurrent GEMM loops, the better of two rounds each): what the cores
// give right now, for a benchmark to note beside a run on a shared host.
func SpeedupNow(ctx context.Context, cores int, round time.Duration) (float64, error) {
	s, err := coreRates(ctx, Config{}, cores, round, 2, func(int, int) {})
	if err != nil {
		return 0, err
	}
	return Speedup(s, cores), nil
}

// coreRates times 1..upTo concurrent single-thread GEMM loops, the best
// of rounds rounds of round each.
func coreRates(ctx context.Context, c Config, upTo int, round time.Duration, rounds int, progress func(int, int)) ([]CoreSample, error) {
	s := coreShape()
	var out []CoreSample
	for n := 1; n <= upTo; n++ {
		progress(n-1, upTo)
		ks := make([]*ops.Kernels, n)
		for i := range ks {
			k, err := ops.New(ops.Config{Threads: 1, ISA: c.ISA})
			if err != nil {
				return nil, fmt.Errorf("profile: %w", err)
			}
			ks[i] = k
		}
		r := rand.New(rand.NewPCG(7, uint64(n)))
		a, b := randSlice(r, s.M*s.K), randSlice(r, s.K*s.N)
		best := 0.0
		for i := 0; i < rounds; i++ {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			var done atomic.Int64
			var wg sync.WaitGroup
			t0 := time.Now()
			stop := t0.Add(round)
			for _, k := range ks {
				wg.Add(1)
				go func(k *ops.Kernels) {
					defer wg.Done()
					out := make([]float32, s.M*s.N)
					for time.Now().Before(stop) {
						k.MatMul(ops.NN, s.M, s.N, s.K, a, s.K, b, s.N, out, s.N, false)
						done.Add(1)
					}
				}(k)
			}
			wg.Wait()
			best = max(best, float64(done.Load())*s.FLOPs()/time.Since(t0).Seconds())
		}
		out = append(out, CoreSample{Ranks: n, GFLOPs: best / 1e9})
	}
	return out, nil
}

// Speedup is the aggregate rate of the samples' largest count within
// cores over one rank's: the cores' parallel speedup (2 on two whole
// cores, less when they share a physical core or the host is loaded).
func Speedup(samples []CoreSample, cores int) float64 {
	var one, all float64
	for _, s := range samples {
		if s.Ranks == 1 {
			one = s.GFLOPs
		}
		if s.Ranks <= cores && s.GFLOPs > 0 {
			all = max(all, s.GFLOPs)
		}
	}
	if !(one > 0) {
		return 1
	}
	return min(max(all/one, 1), float64(cores))
}
