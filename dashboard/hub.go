// Package dashboard serves live pages over HTTP: a training run's
// dashboard (loss, learning rate, throughput, memory and step time per
// rank, plan, mesh and samples, pushed by server-sent events) and the
// planner's explorer. Pages are rendered by package viz; the one script is
// embedded and inline; nothing is fetched from the network.
package dashboard

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"trellis/viz"
)

// Config tunes a Hub.
type Config struct {
	// MinInterval is the least time between two frames sent to one
	// browser (default 2s): updates in between are coalesced. A frame costs
	// the browser more than the server: headless Chromium spent about 10 ms
	// of CPU receiving each event and as much again patching the page, on
	// the 2 vCPUs a training run shares with it (docs/BENCHMARKS.md).
	MinInterval time.Duration
	// MaxSteps bounds the steps kept in memory (default 1<<20); beyond it
	// the oldest are dropped.
	MaxSteps int
	// MaxStreams bounds the browsers following the run at once (the
	// event streams; default 128); beyond it a new one is refused with
	// 503 and retries later.
	MaxStreams int
	// Title heads the page (default "trellis train").
	Title string
	Log   *slog.Logger
}

// Hub holds a run's history and fans it out to browsers. The training side
// (Start, Step, Sample, Finish) only appends under a short lock and signals
// subscribers without blocking; rendering happens on the browsers'
// goroutines, at most once per version of the history, and nothing is
// rendered while no browser is connected.
type Hub struct {
	cfg   Config
	epoch int64 // tells this hub's event ids from another's (a restarted run)

	mu      sync.Mutex
	info    viz.Info
	lines   [][]byte // --metrics objects, append-only
	dropped int      // lines dropped from the front (MaxSteps)
	samples []viz.Sample
	version uint64
	done    bool
	status  string
	subs    map[chan struct{}]struct{}
	end     chan struct{} // closed by Finish: the last frame goes out at once

	rmu    sync.Mutex // the render cache
	parsed []viz.Step
	parseN int // lines of the history parsed (counting dropped ones)
	frame  *frame
}

// New returns an empty hub.
func New(cfg Config) *Hub {
	if cfg.MinInterval <= 0 {
		cfg.MinInterval = 2 * time.Second
	}
	if cfg.MaxSteps <= 0 {
		cfg.MaxSteps = 1 << 20
	}
	if cfg.Title == "" {
		cfg.Title = "trellis train"
	}
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = 128
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Hub{cfg: cfg, epoch: time.Now().UnixNano(), subs: map[chan struct{}]struct{}{}, end: make(chan struct{})}
}

// changed bumps the version and wakes every subscriber without blocking:
// each has a one-slot channel, so a pending wake-up absorbs the rest.
// Called with mu held.
func (h *Hub) changed() {
	h.version++
	for ch := range h.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Start records the run's description.
func (h *Hub) Start(info viz.Info) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.info = info
	h.changed()
}

// Step appends one --metrics object; the hub keeps the slice.
func (h *Hub) Step(line []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lines = append(h.lines, line)
	if len(h.lines) > h.cfg.MaxSteps {
		h.lines = h.lines[1:]
		h.dropped++
	}
	h.changed()
}

// Sample records a generated text.
func (h *Hub) Sample(step int, text string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.samples = append(h.samples, viz.Sample{Step: step, Text: text})
	if len(h.samples) > viz.MaxSamples {
		h.samples = h.samples[len(h.samples)-viz.MaxSamples:]
	}
	h.changed()
}

// Finish marks the run over: browsers get the last frame and an end event.
func (h *Hub) Finish(status string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.done {
		close(h.end)
	}
	h.done, h.status = true, status
	h.changed()
}

// subscribe returns a channel that receives a value after every change
// (coalesced), and its cancel function; ok is false when MaxStreams
// browsers already follow the run.
func (h *Hub) subscribe() (_ chan struct{}, cancel func(), ok bool) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	if len(h.subs) >= h.cfg.MaxStreams {
		h.mu.Unlock()
		return nil, nil, false
	}
	h.subs[ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		delete(h.subs, ch)
		h.mu.Unlock()
	}, true
}

// snapshot copies what a frame needs; lines is an append-only prefix, so
// its elements can be read after the lock is released.
func (h *Hub) snapshot() (info viz.Info, lines [][]byte, dropped int, samples []viz.Sample, v uint64, done bool, status string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.info, h.lines, h.dropped, append([]viz.Sample(nil), h.samples...), h.version, h.done, h.status
}

// render returns the frame of the current version, rendering it if no
// browser has yet. Lines that do not parse are logged and skipped.
func (h *Hub) render() *frame {
	// The snapshot is taken under rmu, so that renders see the history
	// grow monotonically (the parse state follows it).
	h.rmu.Lock()
	defer h.rmu.Unlock()
	info, lines, dropped, samples, v, done, status := h.snapshot()
	if h.frame != nil && v == h.frame.version {
		return h.frame
	}
	if h.parseN < dropped { // the front was dropped: parse again from the start
		h.parsed, h.parseN = nil, dropped
	}
	for _, b := range lines[h.parseN-dropped:] {
		h.parseN++
		s, err := viz.ParseStep(b)
		if err != nil {
			h.cfg.Log.Warn("dashboard: skipping a metrics line", "err", err)
			continue
		}
		h.parsed = append(h.parsed, s)
	}
	if n := len(h.parsed) - h.cfg.MaxSteps; n > 0 {
		h.parsed = h.parsed[n:]
	}
	run := &viz.Run{Info: info, Steps: h.parsed, Samples: samples, Status: statusLine(info, h.parsed, done, status), Live: true}
	h.frame = newFrame(h.epoch, v, run.Status, done, viz.Panels(run), h.frame)
	return h.frame
}

func statusLine(info viz.Info, steps []viz.Step, done bool, status string) string {
	if done {
		return status
	}
	if len(steps) == 0 {
		return "waiting for the first step"
	}
	s := fmt.Sprintf("running: step %d", steps[len(steps)-1].Step)
	if info.ToStep > 0 {
		s += fmt.Sprintf(" of %d", info.ToStep)
	}
	return s
}
