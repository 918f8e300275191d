package profile

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"trellis/comm"
	"trellis/comm/local"
	"trellis/ops"
)

// Handoff is the local link as the engine's goroutine ranks meet it: all-
// reduces that arrive from computing (a tensor-parallel all-reduce between
// two GEMMs, a gradient bucket after a layer's backward), at several sizes,
// fitted by the planner's α–β model. Back-to-back collectives (Link's fit)
// keep the ranks' goroutines running and their buffers in cache; here each
// rank computes coreShape's GEMM before every all-reduce, waits parked for
// its peers and is woken (a goroutine hand-off, a core to find), and finds
// its buffer evicted by the GEMM: a 4 KiB all-reduce cost 35 µs this way
// against 13 µs back to back on a Zen 4, a 2 MiB one 390 µs against 250.
//
// The engine's waits poll where its ranks have cores of their own
// (local.PollFor) and block at once where they outnumber the cores, and
// the two meet different hand-offs (polled, no sleeping core to wake: a
// 4 KiB all-reduce 4–6 µs against 35 on an Intel Xeon), so the profile
// measures both: Result.Handoff blocking, Result.PolledHandoff polled.
//
// Each sample is the exposed part of the waits, Stats.Wait − Skew −
// Crowded per all-reduce averaged over the ranks: what the engine books as
// exposed communication (train/split.go). The wait for a peer still
// computing (Skew) is the compute's, as there.
type Handoff struct {
	Samples []CommSample // one per size: the median over the rounds
	// LatencyS and BWBytes are the α–β fit to Samples, bounded by the
	// back-to-back fit (Handoff.fit): a collective between computing ranks
	// costs no less than one between ranks that wait for nothing, and
	// moves its bytes no faster.
	LatencyS, BWBytes float64
	RMS               float64 // the fit's RMS relative error
}

// handoffSizes are the all-reduces the hand-off is measured at: from a
// loss or a norm (4 KiB) to a layer's activations or gradient bucket.
func handoffSizes() []int64 { return []int64{4 << 10, 64 << 10, 512 << 10, 2 << 20} }

// measureHandoffOver measures the hand-off on n ranks at handoffSizes and
// fits it, bounded by the back-to-back link l, with the ranks' waits
// polling for poll before they block (local.Config.Poll: 0 blocks at
// once, as where ranks outnumber the cores).
func measureHandoffOver(ctx context.Context, c Config, n int, poll time.Duration, l Link) (Handoff, error) {
	var h Handoff
	for _, bytes := range handoffSizes() {
		s, err := measureHandoff(ctx, c, n, poll, bytes)
		if err != nil {
			return h, err
		}
		h.Samples = append(h.Samples, s)
	}
	return h, h.fit(l)
}

// measureHandoff runs the compute-then-all-reduce loop on n ranks,
// `rounds` times on a fresh world each, and returns the median over the
// rounds of the mean exposed wait per all-reduce.
func measureHandoff(ctx context.Context, c Config, n int, poll time.Duration, bytes int64) (CommSample, error) {
	iters, rounds := 200, 7
	if c.Quick {
		iters, rounds = 100, 5
	}
	s := coreShape()
	loop := func() (float64, error) {
		gs, err := local.New(local.Config{Size: n, Poll: poll})
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
					if err := comm.AllReduce(gs[r], comm.F32(buf), comm.Sum); err != nil {
						errs[r] = err
						return
					}
				}
			}(r)
		}
		wg.Wait()
		var exposed time.Duration
		for r, g := range gs {
			if errs[r] != nil {
				return 0, fmt.Errorf("profile: hand-off: %w", errs[r])
			}
			st := g.Stats()
			exposed += st.Wait - st.Skew - st.Crowded
		}
		return exposed.Seconds() / float64(n*iters), nil
	}
	per := make([]float64, 0, rounds)
	for range rounds {
		if err := ctx.Err(); err != nil {
			return CommSample{}, err
		}
		x, err := loop()
		if err != nil {
			return CommSample{}, err
		}
		per = append(per, x)
	}
	slices.Sort(per)
	return CommSample{Op: "allreduce", Ranks: n, Bytes: bytes, Seconds: max(per[len(per)/2], 0)}, nil
}

// fit sets the hand-off's α and β: FitLink on its samples, α at least
// and β at most the back-to-back link l's.
func (h *Handoff) fit(l Link) error {
	a, bw, rms, err := FitLink(h.Samples)
	if err != nil {
		return fmt.Errorf("profile: hand-off: %w", err)
	}
	h.LatencyS, h.BWBytes, h.RMS = max(a, l.LatencyS), bw, rms
	if l.BWBytes > 0 {
		h.BWBytes = min(bw, l.BWBytes)
	}
	return nil
}
