package viz

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"trellis/metrics"
)

var segRe = regexp.MustCompile(`<rect class="seg" data-rank="(\d+)" data-kind="([^"]*)" data-tag="([^"]*)" data-value="([^"]*)"`)

// segs reads rank/kind/tag -> value from a bar chart.
func segs(t *testing.T, svg string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, m := range segRe.FindAllStringSubmatch(svg, -1) {
		v, err := strconv.ParseFloat(m[4], 64)
		if err != nil {
			t.Fatalf("data-value %q: %v", m[4], err)
		}
		out[m[1]+"/"+m[2]+"/"+m[3]] = v
	}
	return out
}

func step(n int, wait, stepS float64, predicted *metrics.Tags) Step {
	s := Step{Step: n, StepS: stepS, Predicted: predicted}
	for r := range 2 {
		s.Ranks = append(s.Ranks, RankMem{Rank: r, Tags: metrics.Tags{Param: int64(100 + r), Grad: 200, Optim: 400, Act: int64(1000 * n), Workspace: 50, Comm: 70,
			Peak: int64(1500 + r)}, CommWaitS: wait * float64(r+1)})
	}
	return s
}

func TestMemoryBars(t *testing.T) {
	pred := &metrics.Tags{Param: 1, Grad: 2, Optim: 3, Act: 4, Workspace: 5, Comm: 6}
	for _, c := range []struct {
		name  string
		steps []Step
		bars  int
	}{
		{"measured", []Step{step(1, 0, 1, nil), step(2, 0, 1, nil)}, 2},
		{"with prediction", []Step{step(1, 0, 1, pred)}, 4},
		{"none", nil, 0},
	} {
		bars := MemoryBars(c.steps)
		if len(bars) != c.bars {
			t.Fatalf("%s: %d bars, want %d", c.name, len(bars), c.bars)
		}
		if len(bars) == 0 {
			continue
		}
		got := segs(t, BarChart{ID: "m", Unit: "bytes", Bars: bars, Limit: 1 << 20}.SVG())
		last := c.steps[len(c.steps)-1]
		for _, rk := range last.Ranks {
			for _, tag := range Tags() {
				if v := got[strconv.Itoa(rk.Rank)+"/measured/"+tag]; v != float64(rk.Tag(tag)) {
					t.Errorf("%s: rank %d %s = %g, want %d", c.name, rk.Rank, tag, v, rk.Tag(tag))
				}
				if last.Predicted != nil {
					if v := got[strconv.Itoa(rk.Rank)+"/predicted/"+tag]; v != float64(pred.Tag(tag)) {
						t.Errorf("%s: rank %d predicted %s = %g, want %d", c.name, rk.Rank, tag, v, pred.Tag(tag))
					}
				}
			}
		}
	}
}

// TestStepSplit: the mean over steps after the first of each rank's
// exposed communication (deltas of the cumulative wait) and the rest.
func TestStepSplit(t *testing.T) {
	steps := []Step{step(1, 0.5, 9, nil), step(2, 0.6, 1.0, nil), step(3, 0.7, 2.0, nil)}
	bars := StepSplit(steps)
	if len(bars) != 2 {
		t.Fatalf("%d bars, want 2", len(bars))
	}
	for r, b := range bars {
		wait := (0.7 - 0.5) * float64(r+1) / 2 // two steps after the first
		want := map[string]float64{"comm exposed": wait, "compute + misc": 1.5 - wait}
		for _, s := range b.Segs {
			if math.Abs(s.Value-want[s.Name]) > 1e-12 {
				t.Errorf("rank %d %s = %g, want %g", r, s.Name, s.Value, want[s.Name])
			}
		}
	}
	one := StepSplit(steps[:1])
	if one[1].Segs[1].Value != 1.0 || one[1].Segs[0].Value != 8 {
		t.Errorf("one step: %+v, want comm 1 and the rest 8", one[1].Segs)
	}
}

// splitStep is step n of a 2-rank run whose cumulative parts are the given
// per-step parts summed over steps 1..n (rank r's scaled by r+1).
func splitStep(n int, compute, wait, bubble, misc func(i int) float64) Step {
	s := Step{Step: n, StepS: 1}
	for r := range 2 {
		var c, w, b, m float64
		for i := 1; i <= n; i++ {
			c, w, b, m = c+compute(i), w+wait(i), b+bubble(i), m+misc(i)
		}
		k := float64(r + 1)
		c, m = c*k, m*k
		s.Ranks = append(s.Ranks, RankMem{Rank: r, CommWaitS: w * k, BubbleS: b * k, ComputeS: &c, MiscS: &m})
	}
	return s
}

// TestStepSplitMeasured: with compute_s and misc_s, each rank's bar is its
// own four parts, the means of their per-step increases after the first
// step; a counter that restarts (a resumed run) counts from zero.
func TestStepSplitMeasured(t *testing.T) {
	compute := func(i int) float64 { return 0.2 + 0.01*float64(i) }
	wait := func(i int) float64 { return 0.05 * float64(i%3) }
	bubble := func(i int) float64 { return 0.03 }
	misc := func(i int) float64 { return 0.001*float64(i) + 0.0001*float64(i*i) }
	var steps []Step
	for n := 1; n <= 5; n++ {
		steps = append(steps, splitStep(n, compute, wait, bubble, misc))
	}
	mean := func(f func(int) float64) float64 { return (f(2) + f(3) + f(4) + f(5)) / 4 }
	check := func(name string, bars []Bar) {
		t.Helper()
		if len(bars) != 2 {
			t.Fatalf("%s: %d bars, want 2", name, len(bars))
		}
		for r, b := range bars {
			k := float64(r + 1)
			want := []Seg{{"compute", k * mean(compute)}, {"comm exposed", k * mean(wait)}, {"bubble", k * mean(bubble)}, {"misc", k * mean(misc)}}
			if len(b.Segs) != len(want) {
				t.Fatalf("%s: rank %d segments %+v, want %+v", name, r, b.Segs, want)
			}
			for i, w := range want {
				if g := b.Segs[i]; g.Name != w.Name || math.Abs(g.Value-w.Value) > 1e-12 {
					t.Errorf("%s: rank %d segment %d = %s %g, want %s %g", name, r, i, g.Name, g.Value, w.Name, w.Value)
				}
			}
		}
	}
	check("one run", StepSplit(steps))
	// Resumed after step 3: the new process counts from zero again (each
	// part's step 4 is below its total over steps 1-3, as in any run past
	// its first few steps: a restart is seen as a decrease).
	resumed := append([]Step(nil), steps[:3]...)
	for n := 4; n <= 5; n++ {
		s := splitStep(n-3, func(i int) float64 { return compute(i + 3) }, func(i int) float64 { return wait(i + 3) },
			func(i int) float64 { return bubble(i + 3) }, func(i int) float64 { return misc(i + 3) })
		s.Step = n
		resumed = append(resumed, s)
	}
	check("resumed", StepSplit(resumed))
	// An older file: no compute_s; the rest of the step is one part.
	for i := range steps {
		for r := range steps[i].Ranks {
			steps[i].Ranks[r].ComputeS, steps[i].Ranks[r].MiscS = nil, nil
		}
	}
	if b := StepSplit(steps)[0]; len(b.Segs) != 3 || b.Segs[0].Name != "compute + misc" || math.Abs(b.Segs[0].Value-(1-mean(wait)-mean(bubble))) > 1e-12 {
		t.Errorf("without compute_s: %+v, want compute + misc = step - wait - bubble, comm exposed, bubble", b.Segs)
	}
}

func TestBarChartLimit(t *testing.T) {
	bars := []Bar{{Label: "a", Segs: []Seg{{"param", 10 << 20}}}}
	for _, c := range []struct {
		limit    float64
		drawn    bool
		offScale bool
	}{{0, false, false}, {20 << 20, true, false}, {1 << 30, false, true}} {
		svg := BarChart{ID: "b", Unit: "bytes", Bars: bars, Limit: c.limit}.SVG()
		if got := strings.Contains(svg, `class="limit"`); got != c.drawn {
			t.Errorf("limit %g: line drawn %v, want %v", c.limit, got, c.drawn)
		}
		if got := strings.Contains(svg, "off scale"); got != c.offScale {
			t.Errorf("limit %g: off-scale note %v, want %v", c.limit, got, c.offScale)
		}
	}
}

func TestUnitScale(t *testing.T) {
	for _, c := range []struct {
		unit string
		top  float64
		want string // the last tick's label ends with this
	}{{"bytes", 70 << 30, " GiB"}, {"bytes", 300 << 20, " MiB"}, {"bytes", 900, " B"}, {"s", 0.004, " ms"}, {"s", 5, " s"}} {
		s := unitScale(c.unit, c.top, 0, 100)
		last := s.tickText[len(s.tickText)-1]
		if !strings.HasSuffix(last, c.want) || s.ticks[len(s.ticks)-1] < c.top {
			t.Errorf("%s %g: last tick %q at %g, want a label in%s covering the top", c.unit, c.top, last, s.ticks[len(s.ticks)-1], c.want)
		}
		if p := s.px(s.ticks[len(s.ticks)-1]); math.Abs(p-100) > 1e-9 {
			t.Errorf("%s %g: last tick at %g px, want 100", c.unit, c.top, p)
		}
	}
}
