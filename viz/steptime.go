package viz

import (
	"fmt"
	"html/template"
	"math"
)

// The parts of a step-time bar, in stacking order.
const (
	partCompute = "compute"
	partComm    = "comm exposed"
	partBubble  = "bubble"
	partMisc    = "misc"
	partRest    = "compute + misc" // older metrics files: compute and misc in one
)

// SplitReported reports whether the step's ranks carry the measured split
// (compute_s and misc_s next to comm_wait_s and bubble_s).
func SplitReported(s Step) bool {
	for _, rk := range s.Ranks {
		if rk.ComputeS == nil || rk.MiscS == nil {
			return false
		}
	}
	return len(s.Ranks) > 0
}

// StepSplit is each rank's mean step time split into parts, over the steps
// after the first (which includes warm-up) when there are several. When
// the last step carries the measured split, each rank's bar is its own
//
//	T_step = compute + comm exposed + bubble + misc
//
// (segments compute, comm exposed, bubble, misc, in seconds per step).
// Older metrics files have only the exposed communication and the bubble;
// the rest of rank 0's step time is then one part:
//
//	compute + misc = step − comm exposed − bubble
//
// (segments compute + misc, comm exposed and, when reported, bubble).
// The per-rank fields are cumulative: a step's part is the increase over
// the line before, and a decrease is a counter restarted from zero (a
// resumed run appends to the same file), counted from there. A restart
// whose first step exceeds the total before it goes unseen (the step then
// counts as the difference).
func StepSplit(steps []Step) []Bar {
	if len(steps) == 0 {
		return nil
	}
	from := min(1, len(steps)-1) // the first step in the mean
	n := float64(len(steps) - from)
	last := steps[len(steps)-1]
	measured := SplitReported(last)
	stepS := 0.0
	for _, s := range steps[from:] {
		stepS += s.StepS
	}
	var bars []Bar
	for _, rk := range last.Ranks {
		mean := func(f func(RankMem) float64) float64 { return growth(steps, rk.Rank, from, f) / n }
		wait := mean(func(r RankMem) float64 { return r.CommWaitS })
		bub := mean(func(r RankMem) float64 { return r.BubbleS })
		var segs []Seg
		if measured {
			segs = []Seg{{partCompute, mean(func(r RankMem) float64 { return deref(r.ComputeS) })}, {partComm, wait},
				{partBubble, bub}, {partMisc, mean(func(r RankMem) float64 { return deref(r.MiscS) })}}
		} else {
			segs = []Seg{{partRest, math.Max(0, stepS/n-wait-bub)}, {partComm, wait}}
			if rk.BubbleS > 0 {
				segs = append(segs, Seg{partBubble, bub})
			}
		}
		bars = append(bars, Bar{Label: fmt.Sprintf("rank %d", rk.Rank), Rank: rk.Rank, Kind: "time", Segs: segs})
	}
	return bars
}

// growth sums a rank's cumulative field's increases over steps[from:]
// (steps[0]'s from zero); a value below the line before's counts from zero.
// A step without the rank adds nothing.
func growth(steps []Step, rank, from int, f func(RankMem) float64) float64 {
	prev, sum := 0.0, 0.0
	for i, s := range steps {
		rk, ok := rankOf(s, rank)
		if !ok {
			continue
		}
		v := f(rk)
		if i >= from {
			if d := v - prev; d >= 0 {
				sum += d
			} else {
				sum += v
			}
		}
		prev = v
	}
	return sum
}

// rankOf finds rank r's entry of a step (usually at its own index).
func rankOf(s Step, r int) (RankMem, bool) {
	if r >= 0 && r < len(s.Ranks) && s.Ranks[r].Rank == r {
		return s.Ranks[r], true
	}
	for _, rk := range s.Ranks {
		if rk.Rank == r {
			return rk, true
		}
	}
	return RankMem{}, false
}

func deref(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}

func stepTimePanel(r *Run) Panel {
	bars := StepSplit(r.Steps)
	legend := []string{partRest, partComm}
	note := "mean per step after the first: T_step = compute + misc + exposed communication (+ bubble); step time is rank 0's, " +
		"so a rank that waits for rank 0's work between steps (evaluation, samples) shows more exposed communication than that; " +
		"these metrics do not split compute from misc"
	if n := len(r.Steps); n > 0 && SplitReported(r.Steps[n-1]) {
		legend = []string{partCompute, partComm, partBubble, partMisc}
		note = "mean per step after the first, as each rank measured it: compute (forward and backward), exposed communication " +
			"(waiting on collectives), pipeline bubble, misc (data, optimizer, bookkeeping); the four add up to the rank's step time"
	} else {
		for _, b := range bars {
			if len(b.Segs) > 2 {
				legend = append(legend, partBubble)
				break
			}
		}
	}
	c := BarChart{ID: "steptime-chart", Unit: "s", Bars: bars, Legend: legend}
	return Panel{ID: "steptime", Title: "Step time per rank", Note: note, HTML: template.HTML(c.SVG())}
}
