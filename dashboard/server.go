package dashboard

import (
	_ "embed"
	"fmt"
	"html/template"
	"net/http"
	"time"

	"trellis/viz"
)

//go:embed assets/live.js
var liveJS string

// writeTimeout drops a browser that has not taken a frame for this long.
const writeTimeout = 30 * time.Second

// Handler serves the dashboard:
//
//	GET /               the page, rendered now, with a script that follows /events
//	GET /events         server-sent events: "frame" (JSON: the panels that changed
//	                    since the browser's last frame, by id) after changes, at
//	                    most every MinInterval; "end" when the run is over
//	GET /metrics.jsonl  the --metrics lines so far (for trellis report)
//
// Each frame carries an event id; the browser sends back the last one it
// got (?since= on the first request, the Last-Event-ID header when it
// reconnects), and gets only what changed after it.
func (h *Hub) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", h.page)
	mux.HandleFunc("GET /events", h.events)
	mux.HandleFunc("GET /metrics.jsonl", h.metrics)
	return mux
}

func (h *Hub) page(w http.ResponseWriter, r *http.Request) {
	f := h.render()
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	p := viz.Page{Title: h.cfg.Title, Status: f.status, Panels: f.page(), Script: template.JS(liveJS), Since: f.id()}
	if err := viz.WriteHTML(w, p); err != nil {
		h.cfg.Log.Warn("dashboard: page", "err", err)
	}
}

func (h *Hub) metrics(w http.ResponseWriter, r *http.Request) {
	_, lines, _, _, _, _, _ := h.snapshot()
	w.Header().Set("Content-Type", "application/jsonl")
	for _, b := range lines {
		if _, err := fmt.Fprintf(w, "%s\n", b); err != nil {
			return
		}
	}
}

// events streams frames to one browser. A slow browser holds only its own
// goroutine: wake-ups coalesce in a one-slot channel and each write sends
// the newest frame, so nothing queues up behind it.
func (h *Hub) events(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	wake, cancel, ok := h.subscribe()
	if !ok {
		w.Header().Set("Retry-After", "10")
		http.Error(w, fmt.Sprintf("%d browsers already follow this run", h.cfg.MaxStreams), http.StatusServiceUnavailable)
		return
	}
	defer cancel()
	last := r.Header.Get("Last-Event-ID")
	if last == "" {
		last = r.URL.Query().Get("since")
	}
	f := h.render()
	sent := f.since(last)
	if f.version == sent { // nothing to send yet: let the browser know it is connected
		w.WriteHeader(http.StatusOK)
		if rc.Flush() != nil {
			return
		}
	}
	for {
		if f.version != sent {
			if err := send(rc, w, f.id(), "frame", f.diff(sent)); err != nil {
				return
			}
			sent = f.version
		}
		if f.done {
			send(rc, w, "", "end", []byte("{}"))
			return
		}
		select {
		case <-wake:
		case <-r.Context().Done():
			return
		}
		select {
		case <-time.After(h.cfg.MinInterval):
		case <-h.end: // the server closes soon after the run ends
		case <-r.Context().Done():
			return
		}
		f = h.render()
	}
}

// send writes one event (with an id when id is not empty) and flushes it.
func send(rc *http.ResponseController, w http.ResponseWriter, id, event string, data []byte) error {
	rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if id != "" {
		if _, err := fmt.Fprintf(w, "id: %s\n", id); err != nil {
			return err
		}
	}
	if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, data); err != nil {
		return err
	}
	return rc.Flush()
}
