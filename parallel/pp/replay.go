package pp

import (
	"trellis/trace"
)

// Replay runs s with the compute durations one step of a trace measured:
// spans[r] are rank r's compute spans of that step (named as the executor
// names them, "F mb3 c0"), in µs, each message delayed by wire (µs; zero:
// none). Each rank runs its passes in the order the trace shows, which is
// s's order but for movable actions the executor ran ahead (WithOrder
// checks it). The result's idle fractions are the bubble the schedule's
// dependencies and the modelled network alone impose on those durations,
// without waking or scheduling delays: set against the idle fraction the
// trace measured, it splits the measured idle time into the schedule's
// (Replay with no wire), the link's (the difference the wire makes) and
// the executor's and the machine's (the rest).
func Replay(s *Schedule, spans [][]trace.Event, wire Wire) (Result, error) {
	type key struct {
		r  int
		op Op
		mb int
		ch int
	}
	dur := map[key]int64{}
	for r, evs := range spans {
		acts, durs, err := executedOrder(r, evs)
		if err != nil {
			return Result{}, err
		}
		for i, a := range acts {
			dur[key{r, a.Op, a.MB, a.Chunk}] = durs[i]
		}
		if s, err = s.WithOrder(r, acts); err != nil {
			return Result{}, err
		}
	}
	return SimulateLink(s, func(r int, a Action) int64 {
		return dur[key{r, a.Op, a.MB, a.Chunk}]
	}, wire)
}

// MeanOwnIdle is the ranks' mean idle fraction over each rank's own span,
// 1 − Busy/End: what a trace's per-rank pipeline spans measure, which do
// not count a rank's wait after its last action for the others to finish.
func (r Result) MeanOwnIdle() float64 {
	if len(r.Busy) == 0 {
		return 0
	}
	var sum float64
	for i, b := range r.Busy {
		if r.End[i] > 0 {
			sum += 1 - float64(b)/float64(r.End[i])
		}
	}
	return sum / float64(len(r.Busy))
}

// MeanIdle is the ranks' mean idle fraction, 1 − Busy/Makespan.
func (r Result) MeanIdle() float64 {
	if r.Makespan == 0 || len(r.Busy) == 0 {
		return 0
	}
	var sum float64
	for _, b := range r.Busy {
		sum += 1 - float64(b)/float64(r.Makespan)
	}
	return sum / float64(len(r.Busy))
}
