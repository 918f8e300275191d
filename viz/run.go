// Package viz turns a training run (the --metrics lines of `trellis train`,
// its description, samples and an optional Chrome trace) and planner
// estimates into HTML panels with inline SVG, written by Go: no script, no
// network. The live dashboard and the static report render the same panels.
package viz

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
)

// Tags are the device memory tags in stacking order (package device's).
var tagNames = [...]string{"param", "grad", "optim", "act", "workspace", "comm"}

// Tags lists the memory tags in the order bars stack them.
func Tags() []string { return append([]string(nil), tagNames[:]...) }

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
}

// Step is one --metrics object.
type Step struct {
	Step       int       `json:"step"`
	Loss       float64   `json:"loss"`
	ValLoss    *float64  `json:"val_loss,omitempty"`
	LR         float64   `json:"lr"`
	GradNorm   float64   `json:"grad_norm"`
	TokensPerS float64   `json:"tokens_per_s"`
	MFU        float64   `json:"mfu"`
	StepS      float64   `json:"step_s"`
	Budget     int64     `json:"budget,omitempty"`
	Ranks      []RankMem `json:"ranks"`
	// Predicted is the planner's per-tag prediction for every rank, when
	// the run has one; a rank's own Predicted takes precedence.
	Predicted map[string]int64 `json:"predicted,omitempty"`
}

// RankMem is one rank's entry of a step: peak bytes per tag since the
// start, and cumulative times. When the split is reported (ComputeS not
// nil), compute_s + comm_wait_s + bubble_s + misc_s is the rank's own step
// time so far; older metrics files have only comm_wait_s (and bubble_s).
type RankMem struct {
	Rank      int              `json:"rank"`
	Param     int64            `json:"param"`
	Grad      int64            `json:"grad"`
	Optim     int64            `json:"optim"`
	Act       int64            `json:"act"`
	Workspace int64            `json:"workspace"`
	Comm      int64            `json:"comm"`
	Peak      int64            `json:"peak"`
	CommBusyS float64          `json:"comm_busy_s"`
	CommWaitS float64          `json:"comm_wait_s"`
	BubbleS   float64          `json:"bubble_s,omitempty"`  // cumulative pipeline idle time, when reported
	ComputeS  *float64         `json:"compute_s,omitempty"` // cumulative forward and backward work, when reported
	MiscS     *float64         `json:"misc_s,omitempty"`    // cumulative rest of the step, when reported
	Predicted map[string]int64 `json:"predicted,omitempty"`
}

// Tag returns the peak bytes of one tag.
func (r RankMem) Tag(t string) int64 {
	switch t {
	case "param":
		return r.Param
	case "grad":
		return r.Grad
	case "optim":
		return r.Optim
	case "act":
		return r.Act
	case "workspace":
		return r.Workspace
	case "comm":
		return r.Comm
	}
	return 0
}

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

// ReadMetrics reads a --metrics file: one JSON object per line; blank
// lines are skipped; an error names the line.
func ReadMetrics(r io.Reader) ([]Step, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var out []Step
	for n := 1; sc.Scan(); n++ {
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
	if err := sc.Err(); err != nil {
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
