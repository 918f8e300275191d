package plan

import (
	"fmt"
	"strings"
)

// DualPipe's and DualPipeV's schedules as data: each rank's steps, from the
// step structure of the reference implementation (deepseek-ai/DualPipe,
// dualpipe.py and dualpipev.py; DeepSeek-V3 report §3.2.1, Figure 5). Chunk
// 0 and chunk 1 are the rank's two chunks (DualPipe: the forward
// direction's stage and the reverse direction's on the first half of the
// ranks, swapped on the second half; DualPipeV: chunks r and 2pp−1−r). A
// step is one of
//
//	F0, F1   a forward chunk            B0, B1   a backward chunk (input and weights)
//	B0z, B1z a backward chunk whose     W        a deferred weight-gradient chunk
//	         weights are deferred (W)   F0+B1, F1+B0   a forward and a backward chunk
//	                                             of different micro-batches run
//	                                             together, each hiding the other's
//	                                             communication
//
// With n ranks (DualPipe: h = min(r, n−1−r) and n/2 in place of r and n),
// m micro-batches (DualPipe: m/2 per direction), rank r runs:
//
//	1  2(n−r−1) × F0                 5  (n−r−1) × B1, F1+B0
//	2  (r+1) × F0, F1                6  (r+1) × B1, B0  (the later half zero-bubble)
//	3  (n−r−1) × B1z, W, F1          7  (n−r−1) × W, B0z
//	4  (m−2n+r+1) × F0+B1, F1+B0     8  (r+1) × W
type DualPipeStep struct {
	Steps []string // the steps of a run, in order
	Count int      // how many times the run repeats
}

// DualPipeRanks returns each rank's runs of steps for schedule s (dualpipe
// or dualpipev) on pp ranks with micro micro-batches.
func DualPipeRanks(s Schedule, pp, micro int) ([][]DualPipeStep, error) {
	switch {
	case !s.dual():
		return nil, fmt.Errorf("plan: schedule %s is not a DualPipe schedule", s)
	case pp < 2 || (s == DualPipe && pp%2 != 0):
		return nil, fmt.Errorf("plan: schedule=%s needs pp ≥ 2 (dualpipe: even), got %d", s, pp)
	case micro < 2*pp || (s == DualPipe && micro%2 != 0):
		return nil, fmt.Errorf("plan: schedule=%s needs at least 2·pp = %d micro-batches (dualpipe: an even number), got %d", s, 2*pp, micro)
	}
	out := make([][]DualPipeStep, pp)
	for r := 0; r < pp; r++ {
		n, k, m := pp, r, micro
		if s == DualPipe {
			n, k, m = pp/2, min(r, pp-1-r), micro/2
		}
		runs := []DualPipeStep{
			{[]string{"F0"}, 2 * (n - k - 1)},
			{[]string{"F0", "F1"}, k + 1},
			{[]string{"B1z", "W", "F1"}, n - k - 1},
			{[]string{"F0+B1", "F1+B0"}, m - 2*n + k + 1},
			{[]string{"B1", "F1+B0"}, n - k - 1},
			{[]string{"B1", "B0"}, k + 1},
			{[]string{"W", "B0z"}, n - k - 1},
			{[]string{"W"}, k + 1},
		}
		for _, run := range runs {
			if run.Count > 0 {
				out[r] = append(out[r], run)
			}
		}
	}
	return out, nil
}

// DualPipeFlight replays rank r's steps and returns the most forward chunks
// it holds at once without their backward, per chunk: the activation
// counts of the layout (chunk 0: C − r, chunk 1: r + 1, C the chunks of
// the split; counted from the first of a pair, as its forward starts
// before its partner's backward frees).
func DualPipeFlight(runs []DualPipeStep) (peak [2]int) {
	var live [2]int
	add := func(c, d int) {
		live[c] += d
		if live[c] > peak[c] && d > 0 {
			peak[c] = live[c]
		}
	}
	for _, run := range runs {
		for i := 0; i < run.Count; i++ {
			for _, st := range run.Steps {
				for _, part := range strings.Split(st, "+") {
					switch part {
					case "F0":
						add(0, 1)
					case "F1":
						add(1, 1)
					case "B0", "B0z":
						add(0, -1)
					case "B1", "B1z":
						add(1, -1)
					}
				}
			}
		}
	}
	return peak
}

// FormatDualPipe writes each rank's runs on one line: "F0×6  (F0 F1)×2 …".
func FormatDualPipe(ranks [][]DualPipeStep) string {
	var b strings.Builder
	for r, runs := range ranks {
		fmt.Fprintf(&b, "rank %2d:", r)
		for _, run := range runs {
			s := strings.Join(run.Steps, " ")
			if len(run.Steps) > 1 {
				s = "(" + s + ")"
			}
			fmt.Fprintf(&b, " %s×%d", s, run.Count)
		}
		b.WriteString("\n")
	}
	return b.String()
}
