package main

import (
	"fmt"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"trellis/dashboard"
	"trellis/viz"
)

// BenchmarkBrowserCPU is the CPU time headless Chromium spends on a page,
// in CPU seconds per minute (the browser and its renderer, GPU and utility
// processes, user + system): a number that other tenants of the machine
// disturb much less than a training run's tokens/s. "idle" is a static
// page; "dashboard" is the live dashboard of a synthetic run (4 ranks, a
// step every 250 ms like the default job's) fed for BENCH_BROWSER_S
// seconds (default 60) after 10 s of warm-up. Run it alone:
//
//	go test ./cmd/trellis -run '^$' -bench BrowserCPU -benchtime 1x
func BenchmarkBrowserCPU(b *testing.B) {
	secs := 60
	if v, err := strconv.Atoi(os.Getenv("BENCH_BROWSER_S")); err == nil && v > 0 {
		secs = v
	}
	window := time.Duration(secs) * time.Second
	b.Run("idle", func(b *testing.B) {
		path := filepath.Join(b.TempDir(), "idle.html")
		if err := os.WriteFile(path, []byte("<!DOCTYPE html><p>idle</p>"), 0o644); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			browserCPU(b, "file://"+path, nil, window)
		}
	})
	b.Run("dashboard", func(b *testing.B) {
		for b.Loop() {
			h := dashboard.New(dashboard.Config{})
			srv := httptest.NewServer(h.Handler())
			h.Start(viz.Info{Plan: "dp=4,zero=3,flash=on", Ranks: 4, Budget: 64 << 20, ToStep: 1 << 20,
				Groups: map[string][][]int{"dp": {{0, 1, 2, 3}}}})
			step := 0
			feed := func(stop <-chan struct{}) {
				t := time.NewTicker(250 * time.Millisecond)
				defer t.Stop()
				for {
					select {
					case <-stop:
						return
					case <-t.C:
						step++
						h.Step(syntheticLine(step))
					}
				}
			}
			browserCPU(b, srv.URL+"/", feed, window)
			srv.Close()
			b.ReportMetric(float64(step), "steps")
		}
	})
}

// browserCPU opens url in a fresh headless Chromium, runs feed (when not
// nil) until the end, and reports the browser's CPU seconds per minute
// over window, after 10 s of warm-up.
func browserCPU(b *testing.B, url string, feed func(stop <-chan struct{}), window time.Duration) {
	b.Helper()
	actx := browser(b)
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	stop := make(chan struct{})
	defer close(stop)
	if feed != nil {
		go feed(stop)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		b.Fatal(err)
	}
	pid := chromedp.FromContext(ctx).Browser.Process().Pid
	time.Sleep(10 * time.Second)
	c0, t0 := treeCPU(b, pid), time.Now()
	time.Sleep(window)
	c1, dt := treeCPU(b, pid), time.Since(t0)
	b.ReportMetric((c1-c0)*60/dt.Seconds(), "browser-CPU-s/min")
}

// treeCPU is the CPU seconds (user + system, with reaped children) of pid
// and its descendants, from /proc.
func treeCPU(b *testing.B, pid int) float64 {
	b.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		b.Skip("no /proc: ", err)
	}
	type proc struct {
		ppid  int
		ticks float64
	}
	procs := map[int]proc{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// Fields after the command's closing parenthesis: state ppid ...;
		// utime, stime, cutime, cstime are fields 14-17 of the whole line.
		f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
		if len(f) < 15 {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		t := 0.0
		for _, x := range f[11:15] {
			v, _ := strconv.ParseFloat(x, 64)
			t += v
		}
		procs[p] = proc{pp, t}
	}
	in := map[int]bool{pid: true}
	for changed := true; changed; {
		changed = false
		for p, pr := range procs {
			if !in[p] && in[pr.ppid] {
				in[p], changed = true, true
			}
		}
	}
	sum := 0.0
	for p := range in {
		sum += procs[p].ticks
	}
	return sum / clockTicks
}

// clockTicks is USER_HZ, 100 on Linux.
const clockTicks = 100

// syntheticLine is a --metrics line of a 4-rank run at step n: a falling
// loss, a cosine learning rate, steady peaks and growing times.
func syntheticLine(n int) []byte {
	x := float64(n)
	var rs []string
	for r := range 4 {
		rs = append(rs, fmt.Sprintf(`{"rank":%d,"param":%d,"grad":%d,"optim":%d,"act":%d,"workspace":%d,"comm":%d,"peak":%d,`+
			`"comm_busy_s":%g,"comm_wait_s":%g,"compute_s":%g,"bubble_s":0,"misc_s":%g}`,
			r, 1250000, 1250000, 2500000, 9000000+1000*r, 500000, 300000, 14000000+1000*r,
			0.05*x, 0.02*x*float64(r+1), 0.2*x, 0.01*x))
	}
	return fmt.Appendf(nil, `{"step":%d,"loss":%g,"lr":%g,"grad_norm":1.1,"tokens_per_s":%g,"mfu":0.02,"step_s":0.25,"budget":67108864,"ranks":[%s]}`,
		n, 1.5+3/math.Sqrt(x)+0.05*math.Sin(x), 3e-4*math.Cos(x/1000), 8000+300*math.Sin(x/7), strings.Join(rs, ","))
}
