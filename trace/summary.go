package trace

import (
	"sort"
	"strings"
)

// RankIdle is one rank's share of a step spent outside the compute lane.
type RankIdle struct {
	Rank    int
	Step    string  // the step span's name
	Busy    int64   // µs of compute inside the step
	Span    int64   // µs of the step
	Idle    float64 // 1 − Busy/Span
	Compute int     // compute spans inside the step
}

// Idle measures, for every rank, the idle fraction of its last span on
// the step lane named name ("step …": the whole optimizer step; "pipeline":
// a pipeline's schedule alone, without the gradient reduction and the
// update): 1 − (time in compute spans inside it) / (its duration). With
// equal-cost stages the pipeline's is its bubble.
func Idle(evs []Event, name string) []RankIdle {
	last := map[int]Event{}
	for _, e := range evs {
		if e.Ph == "X" && e.TID == int(Step) && strings.HasPrefix(e.Name, name) && e.TS >= last[e.PID].TS {
			last[e.PID] = e
		}
	}
	var out []RankIdle
	for r, st := range last {
		ri := RankIdle{Rank: r, Step: st.Name, Span: st.Dur}
		for _, e := range evs {
			if e.Ph != "X" || e.PID != r || e.TID != int(Compute) {
				continue
			}
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
	sort.Slice(out, func(i, j int) bool { return out[i].Rank < out[j].Rank })
	return out
}
