package viz

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

const traceObj = `{"traceEvents":[
 {"name":"forward","ph":"X","ts":0,"dur":40,"pid":0,"tid":0},
 {"name":"backward","ph":"X","ts":30,"dur":40,"pid":0,"tid":0},
 {"name":"wait","ph":"X","ts":70,"dur":30,"pid":0,"tid":1},
 {"name":"forward","ph":"X","ts":50,"dur":50,"pid":1,"tid":0},
 {"name":"meta","ph":"M","pid":1,"tid":0}
]}`

func TestParseTrace(t *testing.T) {
	for _, c := range []struct {
		name, in string
		events   int
		err      string
	}{
		{"object", traceObj, 4, ""},
		{"array", `[{"name":"a","ph":"X","ts":5,"dur":1,"pid":0,"tid":0},{"name":"b","ph":"B","ts":1}]`, 1, ""},
		{"negative dur", `[{"name":"a","ph":"X","ts":5,"dur":-1}]`, 0, "dur=-1"},
		{"not json", `nope`, 0, "Chrome trace JSON"},
	} {
		tr, err := ParseTrace([]byte(c.in))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want one naming %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || len(tr.Events) != c.events {
			t.Errorf("%s: %v, %d events, want %d", c.name, err, len(tr.Events), c.events)
		}
	}
}

// TestUtilisation: overlapping work counts once, waits not at all; the
// span is the whole trace's (0..100 µs here).
func TestUtilisation(t *testing.T) {
	tr, err := ParseTrace([]byte(traceObj))
	if err != nil {
		t.Fatal(err)
	}
	u := tr.Utilisation()
	for pid, want := range map[int]float64{0: 0.7, 1: 0.5} {
		if math.Abs(u[pid]-want) > 1e-12 {
			t.Errorf("pid %d: utilisation %g, want %g", pid, u[pid], want)
		}
	}
	svg := tr.TimelineSVG(800)
	if n := strings.Count(svg, `class="ev"`); n != 4 {
		t.Errorf("%d event rects, want 4", n)
	}
	if n := strings.Count(svg, `data-pid=`); n != 3 { // lanes 0/0, 0/1, 1/0
		t.Errorf("%d lanes, want 3", n)
	}
}

func TestPanelsWithTrace(t *testing.T) {
	tr, _ := ParseTrace([]byte(traceObj))
	ids := map[string]bool{}
	for _, p := range Panels(&Run{Trace: tr}) {
		ids[p.ID] = true
	}
	if !ids["timeline"] || ids["samples"] {
		t.Errorf("panels %v: want a timeline and, in a report without samples, no samples panel", ids)
	}
}

// A run's trace is drawn zoomed to its median step, each event coloured
// by what it is, each lane named by rank and stream: a whole run's events
// were an unreadable barcode, coloured by name, lanes "rank 0/1".
func TestTimelineZoomsToOneStep(t *testing.T) {
	var evs []string
	durs := []float64{1000, 800, 950, 870} // step 1 is warm-up; the median of the rest is step 4's
	for s, d := range durs {
		t0 := float64(s) * 1000
		for r := 0; r < 2; r++ {
			evs = append(evs,
				fmt.Sprintf(`{"name":"step %d","ph":"X","ts":%g,"dur":%g,"pid":%d,"tid":0}`, s+1, t0, d, r),
				fmt.Sprintf(`{"name":"F mb0 c0","ph":"X","ts":%g,"dur":300,"pid":%d,"tid":1}`, t0+10, r),
				fmt.Sprintf(`{"name":"B mb0 c0","ph":"X","ts":%g,"dur":300,"pid":%d,"tid":1}`, t0+320, r),
				fmt.Sprintf(`{"name":"allreduce dp","ph":"X","ts":%g,"dur":100,"pid":%d,"tid":2}`, t0+630, r),
				fmt.Sprintf(`{"name":"wait recvA","ph":"X","ts":%g,"dur":50,"pid":%d,"tid":3}`, t0+740, r))
		}
	}
	tr, err := ParseTrace([]byte("[" + strings.Join(evs, ",") + "]"))
	if err != nil {
		t.Fatal(err)
	}
	svg := tr.TimelineSVG(1000)
	if n := strings.Count(svg, `class="ev"`); n != 10 {
		t.Errorf("%d events drawn, want one step's 10 (2 ranks × 5)", n)
	}
	for _, want := range []string{"within step 4, the median step", "rank 0 · compute", "rank 1 · comm", `data-kind="forward"`, `data-kind="backward"`,
		`data-kind="comm"`, `data-kind="wait"`, `>weight grad<`} {
		if want == `>weight grad<` {
			continue // no W pass in this trace: not in the legend
		}
		if !strings.Contains(svg, want) {
			t.Errorf("timeline lacks %q", want)
		}
	}
	if strings.Contains(svg, ">weight grad<") {
		t.Error("the legend lists a kind the trace does not have")
	}
}
