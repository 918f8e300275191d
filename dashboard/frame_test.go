package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"trellis/viz"
)

func keys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func decode(t *testing.T, b []byte) event {
	t.Helper()
	var e event
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("frame %s: %v", b, err)
	}
	return e
}

// TestDiff: a browser holding version s is sent the panels that changed
// after s, every panel when it holds nothing, and the same bytes as every
// other browser holding s.
func TestDiff(t *testing.T) {
	h := New(Config{})
	h.Start(viz.Info{Plan: "dp=1", Ranks: 1})
	h.Step(line(1))
	f1 := h.render()
	all := decode(t, f1.diff(noVersion))
	if got, want := keys(all.Panels), []string{"loss", "lr", "memory", "mfu", "plan", "samples", "steptime", "throughput"}; !slices.Equal(got, want) {
		t.Errorf("full frame has %q, want %q", got, want)
	}
	if got := decode(t, f1.diff(f1.version)); len(got.Panels)+len(got.Notes) != 0 || got.V != f1.version {
		t.Errorf("a browser up to date is sent %q and notes %q", keys(got.Panels), keys(got.Notes))
	}
	h.Sample(1, "once upon")
	f2 := h.render()
	if got := decode(t, f2.diff(f1.version)); !slices.Equal(keys(got.Panels), []string{"samples"}) || !strings.Contains(got.Panels["samples"], "once upon") {
		t.Errorf("after a sample: panels %q", keys(got.Panels))
	}
	h.Step(line(2))
	f3 := h.render()
	d := decode(t, f3.diff(f1.version))
	if _, ok := d.Panels["plan"]; ok {
		t.Error("the plan panel was sent again though it did not change")
	}
	for _, id := range []string{"loss", "memory", "samples"} {
		if _, ok := d.Panels[id]; !ok {
			t.Errorf("panel %s changed after the browser's version but was not sent", id)
		}
	}
	if &f3.diff(f1.version)[0] != &f3.diff(f1.version)[0] {
		t.Error("the same diff was encoded twice")
	}
	if d.V != f3.version || d.Status != "running: step 2" {
		t.Errorf("frame v=%d status %q", d.V, d.Status)
	}
}

// TestSince: ids name a version of this hub; anything else is nothing.
func TestSince(t *testing.T) {
	h := New(Config{})
	h.Step(line(1))
	h.Step(line(2))
	f := h.render()
	for id, want := range map[string]uint64{
		f.id(): f.version, "": noVersion, "x": noVersion, "1-1": noVersion,
		fmt.Sprintf("%d-1", f.epoch): 1, fmt.Sprintf("%d-%d", f.epoch, f.version+1): noVersion, fmt.Sprintf("%d-1", f.epoch+1): noVersion,
	} {
		if got := f.since(id); got != want {
			t.Errorf("since(%q) = %d, want %d", id, got, want)
		}
	}
}

// TestEventsSince: a page that shows version s and follows /events from
// s is sent nothing until the run changes, then only what changed; a
// browser reconnecting sends Last-Event-ID and is sent only what changed
// after it.
func TestEventsSince(t *testing.T) {
	h := New(Config{MinInterval: time.Millisecond})
	h.Start(viz.Info{Plan: "dp=1", Ranks: 1})
	h.Step(line(1))
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	since := h.render().id()
	s := follow(t, ctx, srv.URL+"/events?since="+since)
	h.Sample(1, "once upon")
	if ev, f, _ := s.next(t); ev != "frame" || !slices.Equal(keys(f.Panels), []string{"samples"}) {
		t.Fatalf("first event %q with panels %q, want only samples", ev, keys(f.Panels))
	}
	// Reconnect with the last id: nothing new, nothing sent; then a step.
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/events", nil)
	req.Header.Set("Last-Event-ID", s.id)
	r := followReq(t, req)
	h.Step(line(2))
	_, f, _ := r.next(t)
	if _, ok := f.Panels["plan"]; ok || f.Panels["loss"] == "" || f.Panels["samples"] != "" {
		t.Errorf("after reconnecting: panels %q, want the step's without plan and samples", keys(f.Panels))
	}
}

// TestFinishNotDelayed: the run's end is sent at once, not after the
// frame interval (the server closes soon after the run ends).
func TestFinishNotDelayed(t *testing.T) {
	h := New(Config{MinInterval: time.Hour})
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := follow(t, ctx, srv.URL)
	if ev, _, _ := s.next(t); ev != "frame" {
		t.Fatalf("first event %q", ev)
	}
	h.Step(line(1))
	h.Finish("finished")
	ev, f, all := s.next(t)
	if ev != "frame" || !f.Done || pointCount(all["loss"]) != 1 {
		t.Errorf("event %q done %v with %d loss points, want the last frame", ev, f.Done, pointCount(all["loss"]))
	}
	if ev, _, _ := s.next(t); ev != "end" {
		t.Errorf("event %q, want end", ev)
	}
}
