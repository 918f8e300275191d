package viz

import (
	"encoding/json"
	"fmt"
	"html/template"
	"math"
	"slices"
	"strings"
)

// Event is one complete ("ph":"X") event of a Chrome trace: times in
// microseconds; pid is the rank, tid a stream of it.
type Event struct {
	Name string  `json:"name"`
	Cat  string  `json:"cat"`
	Ph   string  `json:"ph"`
	TS   float64 `json:"ts"`
	Dur  float64 `json:"dur"`
	PID  int     `json:"pid"`
	TID  int     `json:"tid"`
}

// Trace is the complete events of a trace file, sorted by start.
type Trace struct {
	Events []Event
}

// ParseTrace reads Chrome trace JSON: an object with traceEvents or a bare
// array. Events other than "X" are ignored; an X event with a negative or
// non-finite time is an error.
func ParseTrace(data []byte) (*Trace, error) {
	var obj struct {
		TraceEvents []Event `json:"traceEvents"`
	}
	var evs []Event
	if err := json.Unmarshal(data, &obj); err == nil {
		evs = obj.TraceEvents
	} else if err2 := json.Unmarshal(data, &evs); err2 != nil {
		return nil, fmt.Errorf("trace: not Chrome trace JSON (an object with traceEvents or an array): %w", err)
	}
	t := &Trace{}
	for i, e := range evs {
		if e.Ph != "X" {
			continue
		}
		if !(e.Dur >= 0) || math.IsInf(e.Dur, 0) || math.IsNaN(e.TS) || math.IsInf(e.TS, 0) || math.IsInf(e.TS+e.Dur, 0) {
			return nil, fmt.Errorf("trace: event %d (%q): ts=%g dur=%g: want finite times, dur >= 0 and a finite end ts+dur", i, e.Name, e.TS, e.Dur)
		}
		t.Events = append(t.Events, e)
	}
	if lo, hi := t.span(); len(t.Events) > 0 && math.IsInf(hi-lo, 0) {
		return nil, fmt.Errorf("trace: the events span from ts=%g to %g µs, wider than a number holds", lo, hi)
	}
	slices.SortStableFunc(t.Events, func(a, b Event) int {
		switch {
		case a.TS < b.TS:
			return -1
		case a.TS > b.TS:
			return 1
		}
		return 0
	})
	return t, nil
}

// idle reports whether an event marks waiting rather than work.
func idle(e Event) bool {
	s := strings.ToLower(e.Name + " " + e.Cat)
	return strings.Contains(s, "wait") || strings.Contains(s, "idle") || strings.Contains(s, "bubble")
}

// Utilisation is, per pid, the fraction of the trace's span [first start,
// last end] covered by at least one working (not waiting) event.
func (t *Trace) Utilisation() map[int]float64 {
	lo, hi := t.span()
	out := map[int]float64{}
	byPID := map[int][][2]float64{}
	for _, e := range t.Events {
		if _, ok := out[e.PID]; !ok {
			out[e.PID] = 0
		}
		if !idle(e) {
			byPID[e.PID] = append(byPID[e.PID], [2]float64{e.TS, e.TS + e.Dur})
		}
	}
	if hi <= lo {
		return out
	}
	for pid, iv := range byPID {
		out[pid] = union(iv) / (hi - lo)
	}
	return out
}

// union is the length covered by intervals sorted by start.
func union(iv [][2]float64) float64 {
	total, end := 0.0, math.Inf(-1)
	for _, x := range iv {
		if x[1] <= end {
			continue
		}
		total += x[1] - math.Max(x[0], end)
		end = x[1]
	}
	return total
}

func (t *Trace) span() (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, e := range t.Events {
		lo, hi = math.Min(lo, e.TS), math.Max(hi, e.TS+e.Dur)
	}
	return lo, hi
}

type lane struct{ pid, tid int }

// MaxTraceEvents bounds the rectangles a timeline draws.
const MaxTraceEvents = 20000

// TimelineSVG draws one lane per (pid, tid), labelled "rank R · stream"
// (Trellis's streams: step, compute, comm, wait), each event a rect
// coloured by what it is (forward, backward, weight gradient, comm, wait,
// step, other: eventKind), time in milliseconds. A trace of several steps
// is zoomed to one (zoomStep: the median step), where a whole run's
// events would be a barcode.
func (t *Trace) TimelineSVG(w int) string {
	lo, hi := t.span()
	evs, what := t.Events, ""
	if a, b, name, ok := t.zoomStep(); ok {
		lo, hi, what = a, b, name
		evs = nil
		for _, e := range t.Events {
			if e.TS < b && e.TS+e.Dur > a {
				evs = append(evs, e)
			}
		}
	}
	lanes := map[lane]int{}
	var order []lane
	for _, e := range evs {
		l := lane{e.PID, e.TID}
		if _, ok := lanes[l]; !ok {
			lanes[l] = 0
			order = append(order, l)
		}
	}
	slices.SortFunc(order, func(a, b lane) int {
		if a.pid != b.pid {
			return a.pid - b.pid
		}
		return a.tid - b.tid
	})
	for i, l := range order {
		lanes[l] = i
	}
	h := barTop + rowH*len(order) + padB
	var b strings.Builder
	fmt.Fprintf(&b, `<svg id="timeline-chart" class="chart" viewBox="0 0 %d %d" width="%d" height="%d" role="img">`, w, h, w, h)
	if len(order) == 0 {
		b.WriteString(`<text x="20" y="40" class="empty">no complete events</text></svg>`)
		return b.String()
	}
	xs := newScale(0, math.Max((hi-lo)/1e3, 1e-3), barPadL, float64(w-barPadR), false)
	for i, tk := range xs.ticks {
		x := xs.px(tk)
		fmt.Fprintf(&b, `<line class="grid" x1="%.1f" x2="%.1f" y1="%d" y2="%d"/><text class="tick" x="%.1f" y="%d" text-anchor="middle">%s</text>`,
			x, x, barTop, h-padB, x, h-padB+14, xs.tickText[i])
	}
	label := "time (ms)"
	if what != "" {
		label = fmt.Sprintf("time (ms) within %s, the median step", what)
	}
	fmt.Fprintf(&b, `<text class="label" x="%d" y="%d" text-anchor="middle">%s</text>`, (barPadL+w-padR)/2, h-8, esc(label))
	util := t.Utilisation()
	for i, l := range order {
		fmt.Fprintf(&b, `<text class="tick" x="%d" y="%d" text-anchor="end" data-pid="%d" data-util="%.4f">rank %d · %s · %.0f%%</text>`,
			barPadL-4, barTop+i*rowH+barH-4, l.pid, util[l.pid], l.pid, streamName(l.tid), 100*util[l.pid])
	}
	kinds := map[string]bool{}
	for i, e := range evs {
		if i == MaxTraceEvents {
			break
		}
		k := eventKind(e)
		kinds[k] = true
		x0, x1 := xs.px((math.Max(e.TS, lo)-lo)/1e3), xs.px((math.Min(e.TS+e.Dur, hi)-lo)/1e3)
		fmt.Fprintf(&b, `<rect class="ev" x="%.2f" y="%d" width="%.2f" height="%d" fill="%s" data-kind="%s"><title>%s %.3f ms</title></rect>`,
			x0, barTop+lanes[lane{e.PID, e.TID}]*rowH, math.Max(0.5, x1-x0), barH, kindColor[k], k, esc(e.Name), e.Dur/1e3)
	}
	x := barPadL
	for _, k := range kindOrder {
		if !kinds[k] {
			continue
		}
		fmt.Fprintf(&b, `<rect x="%d" y="4" width="10" height="10" fill="%s"/><text class="legend" x="%d" y="13">%s</text>`, x, kindColor[k], x+13, esc(k))
		x += 22 + 7*len(k)
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// The kinds of event a timeline colours, in legend order.
var (
	kindOrder = []string{"forward", "backward", "weight grad", "comm", "wait", "step", "other"}
	kindColor = map[string]string{"forward": "#4e79a7", "backward": "#f28e2b", "weight grad": "#edc948",
		"comm": "#59a14f", "wait": "#bab0ac", "step": "#e8e8e8", "other": "#b07aa1"}
)

// eventKind is what an event is: the pipeline's F/B/W passes (and events
// named forward/backward), communication (Trellis's comm stream, tid 2),
// waiting (its wait stream, tid 3, or a wait/idle/bubble name), a step
// span (its step stream, tid 0), else other.
func eventKind(e Event) string {
	n := strings.ToLower(e.Name)
	switch {
	case e.TID == 3 || idle(e):
		return "wait"
	case e.TID == 2:
		return "comm"
	case strings.HasPrefix(e.Name, "F ") || strings.HasPrefix(n, "forward"):
		return "forward"
	case strings.HasPrefix(e.Name, "B ") || strings.HasPrefix(n, "backward"):
		return "backward"
	case strings.HasPrefix(e.Name, "W "):
		return "weight grad"
	case e.TID == 0:
		return "step"
	}
	return "other"
}

// streamName names a Trellis trace stream (trace.Lane).
func streamName(tid int) string {
	if names := []string{"step", "compute", "comm", "wait"}; tid >= 0 && tid < len(names) {
		return names[tid]
	}
	return fmt.Sprintf("stream %d", tid)
}

// zoomStep is the window of one step when the trace holds several (the
// "step N" spans of Trellis's step stream): the step of median length
// (the first is left out as warm-up when there are three or more), from
// the earliest rank's start to the latest's end.
func (t *Trace) zoomStep() (lo, hi float64, name string, ok bool) {
	type win struct{ lo, hi float64 }
	steps := map[string]*win{}
	var names []string
	for _, e := range t.Events {
		if e.TID != 0 || !strings.HasPrefix(e.Name, "step ") {
			continue
		}
		w := steps[e.Name]
		if w == nil {
			w = &win{e.TS, e.TS + e.Dur}
			steps[e.Name] = w
			names = append(names, e.Name)
		}
		w.lo, w.hi = math.Min(w.lo, e.TS), math.Max(w.hi, e.TS+e.Dur)
	}
	if len(names) < 2 {
		return 0, 0, "", false
	}
	if len(names) >= 3 {
		names = names[1:]
	}
	slices.SortStableFunc(names, func(a, b string) int {
		da, db := steps[a].hi-steps[a].lo, steps[b].hi-steps[b].lo
		switch {
		case da < db:
			return -1
		case da > db:
			return 1
		}
		return 0
	})
	m := names[len(names)/2]
	return steps[m].lo, steps[m].hi, m, true
}

func timelinePanel(t *Trace) Panel {
	note := "each rank's events (lanes: rank · stream), coloured forward, backward, weight grad, comm, wait; a run of several steps is shown zoomed to its median step; the percentage is the rank's busy fraction over the whole trace (events not named wait, idle or bubble)"
	if len(t.Events) > MaxTraceEvents {
		note += fmt.Sprintf("; the first %d of %d events are drawn", MaxTraceEvents, len(t.Events))
	}
	return Panel{ID: "timeline", Title: "Timeline", Note: note, Wide: true, HTML: template.HTML(t.TimelineSVG(1140))}
}
