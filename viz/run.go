// Package viz turns a training run (the --metrics lines of `trellis train`,
// its description, samples and an optional Chrome trace) and planner
// estimates into HTML panels with inline SVG, written by Go: no script, no
// network. The live dashboard and the static report render the same panels.
package viz

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"

	"trellis/metrics"
)

// Tags lists the memory tags in the order bars stack them.
func Tags() []string { return metrics.TagNames() }

// Info describes a run; every field may be zero (a report made from a
// metrics file alone knows only what the lines say).
type Info struct {
	Plan          string             // canonical plan text ("" unknown)
	Ranks         int                // world size
	Budget        int64              // bytes per device (0: none or unknown)
	Params        int64              // model parameters
	TokensPerStep int                // tokens per optimizer step, all ranks
	FromStep      int                // steps completed before this run
	ToStep        int                // the last step this run will take
	Model         string             // model shape for people, e.g. "layers=4 hidden=256 ..."
	Groups        map[string][][]int // mesh axis -> the rank lists of its groups
	Experts       int                // routed experts per MoE block (0: dense or unknown)
}

// Step is one --metrics object (its schema: package metrics).
type Step = metrics.Line

// RankMem is one rank's entry of a step.
type RankMem = metrics.Rank

// ParseStep decodes one --metrics line and checks what the plots rely on.
func ParseStep(line []byte) (Step, error) {
	var s Step
	if err := json.Unmarshal(line, &s); err != nil {
		return s, fmt.Errorf("metrics line: %w", err)
	}
	if s.Step < 1 {
		return s, fmt.Errorf("metrics line: step=%d must be >= 1", s.Step)
	}
	for _, x := range []float64{s.Loss, s.LR, s.TokensPerS, s.MFU, s.StepS} {
		if math.IsInf(x, 0) {
			return s, fmt.Errorf("metrics line: step %d has an infinite value", s.Step)
		}
	}
	return s, nil
}

// MaxMetricsLines bounds the steps ReadMetrics keeps (a run of 4M steps
// at one step a second runs for seven weeks), and MaxMetricsLine one line.
const (
	MaxMetricsLines = 1 << 22
	MaxMetricsLine  = 16 << 20
)

// ReadMetrics reads a --metrics file: one JSON object per line; blank
// lines are skipped; an error names the line. Memory is bounded: at most
// MaxMetricsLines steps of at most MaxMetricsLine bytes each.
func ReadMetrics(r io.Reader) ([]Step, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxMetricsLine)
	var out []Step
	n := 1
	for ; sc.Scan(); n++ {
		if len(out) == MaxMetricsLines {
			return nil, fmt.Errorf("line %d: more than %d steps: a report reads at most that many", n, MaxMetricsLines)
		}
		b := sc.Bytes()
		if len(trimSpace(b)) == 0 {
			continue
		}
		s, err := ParseStep(b)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		out = append(out, s)
	}
	if err := sc.Err(); errors.Is(err, bufio.ErrTooLong) {
		return nil, fmt.Errorf("line %d: longer than %d bytes (not a --metrics file?)", n, MaxMetricsLine)
	} else if err != nil {
		return nil, err
	}
	return out, nil
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// Sample is a generated text at a step.
type Sample struct {
	Step int
	Text string
}

// Run is everything the panels show.
type Run struct {
	Info    Info
	Steps   []Step
	Samples []Sample
	Trace   *Trace // nil: no trace
	Status  string // one line for people, e.g. "running" or "finished"
	Live    bool   // a dashboard: show panels that are still empty (samples)
	// Versus are other runs whose training and validation losses the loss
	// panel draws beside this run's (trellis report --vs).
	Versus []Versus
}

// Versus is another run to compare with: its name and its steps.
type Versus struct {
	Name  string
	Steps []Step
}

// budget is the device budget: the run's, or the last step's.
func (r *Run) budget() int64 {
	if r.Info.Budget > 0 {
		return r.Info.Budget
	}
	if n := len(r.Steps); n > 0 {
		return r.Steps[n-1].Budget
	}
	return 0
}
