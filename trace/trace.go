// Package trace records what each rank does when, as Chrome trace-event
// JSON (the format Perfetto and chrome://tracing open): one process track
// per rank ("rank N") and, in it, one lane per kind of work —
//
//	step     each optimizer step
//	compute  forward and backward passes (F, B, W with micro-batch and chunk)
//	comm     communication in flight, from issue to completion
//	wait     time the rank is blocked waiting for communication
//
// A nil *Tracer records nothing and costs a nil check: tracing off is free.
// Timestamps are microseconds since the Unix epoch, so the files of
// several processes on one clock merge (Merge) without adjustment.
package trace

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"trellis/internal/bounded"
	"trellis/internal/outfile"
)

// Lane is a thread track inside a rank's process track.
type Lane int

// The lanes.
const (
	Step Lane = iota
	Compute
	Comm
	Wait
)

var laneNames = [...]string{"step", "compute", "comm", "wait"}

func (l Lane) String() string {
	if int(l) < len(laneNames) {
		return laneNames[l]
	}
	return fmt.Sprintf("lane%d", int(l))
}

// Event is one trace event ("X": a complete span; "M": metadata).
type Event struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	TS   int64          `json:"ts"` // µs since the Unix epoch
	Dur  int64          `json:"dur,omitempty"`
	PID  int            `json:"pid"` // the rank
	TID  int            `json:"tid"` // the lane
	Args map[string]any `json:"args,omitempty"`
}

// File is the JSON object format of a trace file.
type File struct {
	TraceEvents     []Event `json:"traceEvents"`
	DisplayTimeUnit string  `json:"displayTimeUnit,omitempty"`
}

// Tracer records one rank's spans. It is safe for concurrent use (the
// comm lane is written by the goroutines that watch operations complete).
type Tracer struct {
	rank   int
	mu     sync.Mutex
	events []Event
}

// New returns a tracer for rank.
func New(rank int) *Tracer { return &Tracer{rank: rank} }

// Now is the current time, or the zero time on a nil tracer (no clock read).
func (t *Tracer) Now() time.Time {
	if t == nil {
		return time.Time{}
	}
	return time.Now()
}

// Span records name on lane from start until now. args are key, value pairs.
func (t *Tracer) Span(lane Lane, name string, start time.Time, args ...any) {
	if t == nil {
		return
	}
	t.SpanTo(lane, name, start, time.Now(), args...)
}

// SpanTo records name on lane over [start, end].
func (t *Tracer) SpanTo(lane Lane, name string, start, end time.Time, args ...any) {
	if t == nil {
		return
	}
	e := Event{Name: name, Cat: lane.String(), Ph: "X", TS: start.UnixMicro(), Dur: max(end.Sub(start).Microseconds(), 1),
		PID: t.rank, TID: int(lane)}
	if len(args) > 1 {
		e.Args = map[string]any{}
		for i := 0; i+1 < len(args); i += 2 {
			e.Args[fmt.Sprint(args[i])] = args[i+1]
		}
	}
	t.mu.Lock()
	t.events = append(t.events, e)
	t.mu.Unlock()
}

// Events is a copy of the recorded spans, with the metadata naming the
// rank's track and lanes first.
func (t *Tracer) Events() []Event {
	if t == nil {
		return nil
	}
	out := []Event{{Name: "process_name", Ph: "M", PID: t.rank, Args: map[string]any{"name": fmt.Sprintf("rank %d", t.rank)}},
		{Name: "process_sort_index", Ph: "M", PID: t.rank, Args: map[string]any{"sort_index": t.rank}}}
	for l := Step; l <= Wait; l++ {
		out = append(out, Event{Name: "thread_name", Ph: "M", PID: t.rank, TID: int(l), Args: map[string]any{"name": l.String()}},
			Event{Name: "thread_sort_index", Ph: "M", PID: t.rank, TID: int(l), Args: map[string]any{"sort_index": int(l)}})
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return append(out, t.events...)
}

// Write writes the tracers' events to path as one trace file.
func Write(path string, ts ...*Tracer) error {
	var evs []Event
	for _, t := range ts {
		evs = append(evs, t.Events()...)
	}
	return writeFile(path, evs)
}

// Append writes the tracers' events to path after the events already
// there (a resumed run's steps follow the earlier run's: timestamps are
// absolute), keeping one copy of each metadata event; a missing file is
// written as by Write.
func Append(path string, ts ...*Tracer) error {
	old, err := Read(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Write(path, ts...)
	}
	if err != nil {
		return err
	}
	type meta struct {
		name     string
		pid, tid int
	}
	seen := map[meta]bool{}
	for _, e := range old {
		if e.Ph == "M" {
			seen[meta{e.Name, e.PID, e.TID}] = true
		}
	}
	for _, t := range ts {
		for _, e := range t.Events() {
			if e.Ph == "M" && seen[meta{e.Name, e.PID, e.TID}] {
				continue
			}
			old = append(old, e)
		}
	}
	return writeFile(path, old)
}

// writeFile writes evs to path, which must not be one of inputs.
func writeFile(path string, evs []Event, inputs ...string) error {
	sort.SliceStable(evs, func(i, j int) bool {
		if (evs[i].Ph == "M") != (evs[j].Ph == "M") {
			return evs[i].Ph == "M"
		}
		return evs[i].TS < evs[j].TS
	})
	b, err := json.Marshal(File{TraceEvents: evs, DisplayTimeUnit: "ms"})
	if err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	if err := outfile.WriteBytes("trace: output", path, b, inputs...); err != nil {
		return err
	}
	return nil
}

// Read reads a trace file.
func Read(path string) ([]Event, error) {
	b, err := bounded.ReadRegular(path, bounded.Trace, "trace file")
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	var f File
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("trace: %s: %w", path, err)
	}
	return f.TraceEvents, nil
}

// RankFile is the file a process writes for its rank under trellis launch.
func RankFile(dir string, rank int) string {
	return filepath.Join(dir, fmt.Sprintf("trace.rank%d.json", rank))
}

// Merge joins dir's per-rank files (trace.rank*.json) into dir/trace.json
// and returns its path and the number of files joined.
func Merge(dir string) (string, int, error) {
	files, err := filepath.Glob(filepath.Join(dir, "trace.rank*.json"))
	if err != nil {
		return "", 0, fmt.Errorf("trace: %w", err)
	}
	if len(files) == 0 {
		return "", 0, fmt.Errorf("trace: no trace.rank*.json files in %s (written by trellis train --trace %s under trellis launch)", dir, dir)
	}
	var evs []Event
	for _, f := range files {
		e, err := Read(f)
		if err != nil {
			return "", 0, err
		}
		evs = append(evs, e...)
	}
	out := filepath.Join(dir, "trace.json")
	return out, len(files), writeFile(out, evs, files...)
}
