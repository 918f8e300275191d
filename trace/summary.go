package trace

import (
	"sort"
	"strings"
)

// RankIdle is one rank's share of a step-lane span spent outside the
// compute lane.
type RankIdle struct {
	Rank    int
	Step    string  // the span's name
	TS      int64   // its start, µs
	Busy    int64   // µs of compute inside it
	Span    int64   // µs of the span
	Idle    float64 // 1 − Busy/Span
	Compute int     // compute spans inside it
}

// IdleSpans measures every span on the step lane whose name starts with
// name ("step …": the whole optimizer step; "pipeline": a pipeline's
// schedule alone, without the gradient reduction and the update): the
// compute time inside it and its idle fraction 1 − compute/duration. With
// equal-cost stages a pipeline span's idle fraction is its bubble. The
// result is ordered by rank, then time.
func IdleSpans(evs []Event, name string) []RankIdle {
	var out []RankIdle
	compute := map[int][]Event{}
	for _, e := range evs {
		if e.Ph == "X" && e.TID == int(Compute) {
			compute[e.PID] = append(compute[e.PID], e)
		}
	}
	for _, st := range evs {
		if st.Ph != "X" || st.TID != int(Step) || !strings.HasPrefix(st.Name, name) {
			continue
		}
		ri := RankIdle{Rank: st.PID, Step: st.Name, TS: st.TS, Span: st.Dur}
		for _, e := range compute[st.PID] {
			a, b := max(e.TS, st.TS), min(e.TS+e.Dur, st.TS+st.Dur)
			if a < b {
				ri.Busy += b - a
				ri.Compute++
			}
		}
		if ri.Span > 0 {
			ri.Idle = 1 - float64(ri.Busy)/float64(ri.Span)
		}
		out = append(out, ri)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Rank != out[j].Rank {
			return out[i].Rank < out[j].Rank
		}
		return out[i].TS < out[j].TS
	})
	return out
}

// Idle is IdleSpans' last span of every rank.
func Idle(evs []Event, name string) []RankIdle {
	all := IdleSpans(evs, name)
	var out []RankIdle
	for i, ri := range all {
		if i+1 == len(all) || all[i+1].Rank != ri.Rank {
			out = append(out, ri)
		}
	}
	return out
}
