package dashboard

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"trellis/viz"
)

func line(step int) []byte {
	return fmt.Appendf(nil, `{"step":%d,"loss":%g,"lr":0.001,"tokens_per_s":1000,"mfu":0.1,"step_s":0.5,"budget":1048576,`+
		`"ranks":[{"rank":0,"param":%d,"grad":20,"optim":40,"act":80,"workspace":5,"comm":7,"peak":150,"comm_wait_s":%g}]}`,
		step, 5/float64(step), 10+step, 0.1*float64(step))
}

// TestPublishNeverBlocks: a subscriber that never takes its wake-ups
// does not hold up Step; the wake-ups coalesce into one.
func TestPublishNeverBlocks(t *testing.T) {
	h := New(Config{})
	wake, cancel, _ := h.subscribe()
	defer cancel()
	for i := 1; i <= 10000; i++ {
		h.Step(line(i))
	}
	h.Sample(3, "text")
	if len(wake) != 1 {
		t.Errorf("%d pending wake-ups, want 1 (coalesced)", len(wake))
	}
	if f := h.render(); !strings.Contains(f.status, "step 10000") {
		t.Errorf("status %q after 10000 steps", f.status)
	}
}

func TestMaxSteps(t *testing.T) {
	h := New(Config{MaxSteps: 3})
	for i := 1; i <= 2; i++ {
		h.Step(line(i))
	}
	h.render()
	for i := 3; i <= 7; i++ {
		h.Step(line(i))
	}
	f := h.render()
	if n := pointCount(panelHTML(f, "loss")); n != 3 {
		t.Errorf("%d loss points kept, want 3", n)
	}
}

// panelHTML is a frame's panel by id ("" when there is none).
func panelHTML(f *frame, id string) string {
	for _, p := range f.panels {
		if p.ID == id {
			return string(p.HTML)
		}
	}
	return ""
}

var dataN = regexp.MustCompile(`data-series="train" data-n="(\d+)"`)

func pointCount(svg string) int {
	m := dataN.FindStringSubmatch(svg)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// event is a "frame" event's data as a browser reads it.
type event struct {
	V      uint64            `json:"v"`
	Status string            `json:"status"`
	Done   bool              `json:"done"`
	Panels map[string]string `json:"panels"`
	Notes  map[string]string `json:"notes"`
}

// sse reads events from a /events stream. Like the page, it keeps every
// panel it has been sent: frames carry only the panels that changed.
type sse struct {
	r      *bufio.Reader
	panels map[string]string
	id     string // the last event id
}

// next returns the next event's name, its data (a frame's) and every
// panel received so far.
func (s *sse) next(t *testing.T) (string, event, map[string]string) {
	t.Helper()
	var ev string
	var f event
	for {
		l, err := s.r.ReadString('\n')
		if err != nil {
			t.Fatalf("event stream: %v", err)
		}
		l = strings.TrimRight(l, "\n")
		switch {
		case strings.HasPrefix(l, "id: "):
			s.id = l[len("id: "):]
		case strings.HasPrefix(l, "event: "):
			ev = l[len("event: "):]
		case strings.HasPrefix(l, "data: "):
			if err := json.Unmarshal([]byte(l[len("data: "):]), &f); err != nil {
				t.Fatalf("event data: %v", err)
			}
		case l == "":
			for id, html := range f.Panels {
				s.panels[id] = html
			}
			return ev, f, s.panels
		}
	}
}

// follow opens url's event stream (url: a server, or its /events?...).
func follow(t *testing.T, ctx context.Context, url string) *sse {
	t.Helper()
	if !strings.Contains(url, "/events") {
		url += "/events"
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	return followReq(t, req)
}

func followReq(t *testing.T, req *http.Request) *sse {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	return &sse{r: bufio.NewReader(resp.Body), panels: map[string]string{}}
}

// waitFor reads frames until one has n loss points.
func (s *sse) waitFor(t *testing.T, n int) event {
	t.Helper()
	for {
		ev, f, _ := s.next(t)
		if ev != "frame" {
			t.Fatalf("event %q before a frame with %d points", ev, n)
		}
		if pointCount(f.Panels["loss"]) == n {
			return f
		}
	}
}

// TestEvents: two browsers follow the run; both see every step (frames
// coalesce, the last one is always sent) and the end.
func TestEvents(t *testing.T) {
	h := New(Config{MinInterval: time.Millisecond})
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.Start(viz.Info{Plan: "dp=1", Ranks: 1, ToStep: 40, Groups: map[string][][]int{"dp": {{0}}}})
	a, b := follow(t, ctx, srv.URL), follow(t, ctx, srv.URL)
	for _, s := range []*sse{a, b} {
		if ev, f, _ := s.next(t); ev != "frame" || !strings.Contains(f.Panels["plan"], "dp=1") {
			t.Fatalf("first event %q, plan panel %q", ev, f.Panels["plan"])
		}
	}
	for i := 1; i <= 40; i++ {
		h.Step(line(i))
	}
	h.Sample(40, "It is a truth")
	for _, s := range []*sse{a, b} {
		f := s.waitFor(t, 40)
		if !strings.Contains(f.Status, "step 40 of 40") {
			t.Errorf("status %q", f.Status)
		}
	}
	h.Finish("finished")
	for _, s := range []*sse{a, b} {
		for {
			ev, f, all := s.next(t)
			if ev == "end" {
				break
			}
			if f.Status != "finished" || !f.Done || !strings.Contains(all["samples"], "It is a truth") {
				t.Errorf("last frame: status %q, done %v, samples %q", f.Status, f.Done, all["samples"])
			}
		}
	}
}

// TestSlowBrowser: a browser that stops reading holds nobody up.
func TestSlowBrowser(t *testing.T) {
	h := New(Config{MinInterval: time.Millisecond})
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	follow(t, ctx, srv.URL) // never read
	fast := follow(t, ctx, srv.URL)
	for i := 1; i <= 300; i++ {
		h.Step(line(i))
	}
	fast.waitFor(t, 300)
}

func TestPageAndMetrics(t *testing.T) {
	h := New(Config{Title: "run <1>"})
	for i := 1; i <= 3; i++ {
		h.Step(line(i))
	}
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	get := func(path string) string {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %s", path, resp.Status)
		}
		return string(b)
	}
	page := get("/")
	for _, want := range []string{"run &lt;1&gt;", `id="loss"`, `id="memory"`, `id="samples"`, "new EventSource", `data-n="3"`} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if got, want := get("/metrics.jsonl"), string(line(1))+"\n"+string(line(2))+"\n"+string(line(3))+"\n"; got != want {
		t.Errorf("metrics.jsonl:\n%s\nwant\n%s", got, want)
	}
	if resp, _ := http.Get(srv.URL + "/nothing"); resp.StatusCode != 404 {
		t.Errorf("GET /nothing: %s", resp.Status)
	}
}

// TestConcurrentRenders: browsers rendering while steps arrive and the
// front of the history is dropped see a consistent, growing history.
func TestConcurrentRenders(t *testing.T) {
	h := New(Config{MaxSteps: 50})
	done := make(chan struct{})
	errs := make(chan string, 4)
	for range 4 {
		go func() {
			last := 0
			for {
				select {
				case <-done:
					errs <- ""
					return
				default:
				}
				n := pointCount(panelHTML(h.render(), "loss"))
				if n > 50 || (n < last && last < 50) {
					errs <- fmt.Sprintf("points went from %d to %d", last, n)
					return
				}
				last = n
			}
		}()
	}
	for i := 1; i <= 400; i++ {
		h.Step(line(i))
	}
	close(done)
	for range 4 {
		if e := <-errs; e != "" {
			t.Error(e)
		}
	}
	if n := pointCount(panelHTML(h.render(), "loss")); n != 50 {
		t.Errorf("%d points at the end, want 50", n)
	}
}
