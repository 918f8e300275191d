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
	// 2(n−1)·α + 2(n−1)/n·S/β, equal Seconds at the fitted β, and at
	// least the back-to-back fit's α: a collective between computing
	// ranks costs no less than one between ranks that wait for nothing.
	LatencyS float64
	// Tries is how many measurements it took: one whose hand-off came out
	// at or below the back-to-back cost (the loop without the collective
	// slowed by another process, a quick profile once wrote latency_us =
	// 0 and the planner then priced every collective at bandwidth alone)
	// is taken again, up to handoffTries times.
	Tries int
}

// handoffTries bounds the hand-off's measurements.
const handoffTries = 3

// measureHandoffOver measures the hand-off until it exceeds what the
// all-reduce costs back to back on l (2(n−1)·α + 2(n−1)/n·S/β), up to
// handoffTries times, and fits its α on l.
func measureHandoffOver(ctx context.Context, c Config, n int, bytes int64, l Link) (Handoff, error) {
	var h Handoff
	for try := 1; try <= handoffTries; try++ {
		var err error
		if h, err = measureHandoff(ctx, c, n, bytes); err != nil {
			return h, err
		}
		h.Tries = try
		if h.Seconds > l.allReduceSeconds(n, bytes) {
			break
		}
	}
	h.fitLatency(l)
	return h, nil
}

// allReduceSeconds is the fitted link's all-reduce of bytes on n ranks,
// in the planner's terms (CommSample.terms).
func (l Link) allReduceSeconds(n int, bytes int64) float64 {
	a, b, _ := CommSample{Op: "allreduce", Ranks: n, Bytes: bytes}.terms()
	return a*l.LatencyS + b/l.BWBytes
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

// fitLatency sets h.LatencyS on the fitted link l (its bandwidth, and
// its back-to-back α as the floor).
func (h *Handoff) fitLatency(l Link) {
	if h.Ranks < 2 || !(l.BWBytes > 0) {
		return
	}
	a, b, _ := CommSample{Op: "allreduce", Ranks: h.Ranks, Bytes: h.Bytes}.terms()
	h.LatencyS = max(l.LatencyS, (h.Seconds-b/l.BWBytes)/a)
}
