package profile

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"trellis/comm"
	"trellis/comm/local"
	"trellis/ops"
)

// Handoff is the cost of a small collective between goroutine ranks that
// arrive from computing, as the engine's ranks do (a tensor-parallel
// all-reduce between two GEMMs, a loss all-reduce after the backward):
// each rank computes coreShape's GEMM, then all-reduces Bytes; the cost
// is the loop's time less the same loop without the all-reduce, per
// all-reduce. Back-to-back collectives (the α–β fit's) keep the ranks'
// goroutines running; here each waits parked for its peers and is woken
// (a goroutine hand-off, a core to find), which is what a training step
// pays.
type Handoff struct {
	Ranks   int
	Bytes   int64
	Seconds float64 // per all-reduce
	// LatencyS is the α that makes the planner's all-reduce,
	// 2(n−1)·α + 2(n−1)/n·S/β, equal Seconds at the fitted β (at least 0).
	LatencyS float64
}

// measureHandoff times the compute-then-all-reduce loop on n ranks, best
// of several rounds with and without the collective.
func measureHandoff(ctx context.Context, c Config, n int, bytes int64) (Handoff, error) {
	iters, rounds := 200, 7
	if c.Quick {
		iters, rounds = 100, 5
	}
	s := coreShape
	loop := func(collective bool) (float64, error) {
		gs, err := local.New(local.Config{Size: n})
		if err != nil {
			return 0, fmt.Errorf("profile: %w", err)
		}
		defer func() {
			for _, g := range gs {
				g.Close()
			}
		}()
		var wg sync.WaitGroup
		errs := make([]error, n)
		t0 := time.Now()
		for r := range gs {
			wg.Add(1)
			go func(r int) {
				defer wg.Done()
				k, err := ops.New(ops.Config{Threads: 1, ISA: c.ISA})
				if err != nil {
					errs[r] = err
					return
				}
				rng := rand.New(rand.NewPCG(9, uint64(r)))
				a, b, out := randSlice(rng, s.M*s.K), randSlice(rng, s.K*s.N), make([]float32, s.M*s.N)
				buf := make([]float32, bytes/4)
				for i := 0; i < iters; i++ {
					k.MatMul(ops.NN, s.M, s.N, s.K, a, s.K, b, s.N, out, s.N, false)
					if collective {
						if err := comm.AllReduce(gs[r], comm.F32(buf), comm.Sum); err != nil {
							errs[r] = err
							return
						}
					}
				}
			}(r)
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return 0, fmt.Errorf("profile: hand-off: %w", err)
			}
		}
		return time.Since(t0).Seconds(), nil
	}
	var with, without float64
	for i := 0; i < rounds; i++ {
		if err := ctx.Err(); err != nil {
			return Handoff{}, err
		}
		w, err := loop(true)
		if err != nil {
			return Handoff{}, err
		}
		wo, err := loop(false)
		if err != nil {
			return Handoff{}, err
		}
		if i == 0 || w < with {
			with = w
		}
		if i == 0 || wo < without {
			without = wo
		}
	}
	return Handoff{Ranks: n, Bytes: bytes, Seconds: max(with-without, 0) / float64(iters)}, nil
}

// fitLatency sets h.LatencyS for a link of bandwidth bw (bytes/s).
func (h *Handoff) fitLatency(bw float64) {
	n := float64(h.Ranks)
	if n < 2 || !(bw > 0) {
		return
	}
	h.LatencyS = max(0, (h.Seconds-2*(n-1)/n*float64(h.Bytes)/bw)/(2*(n-1)))
}
