package viz

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestNiceStep(t *testing.T) {
	for _, c := range []struct{ in, want float64 }{
		{0.9, 1}, {1, 1}, {1.1, 2}, {3, 5}, {7, 10}, {0.013, 0.02}, {420, 500}, {0, 1}, {math.NaN(), 1},
	} {
		if got := niceStep(c.in); math.Abs(got-c.want) > 1e-12*c.want {
			t.Errorf("niceStep(%g) = %g, want %g", c.in, got, c.want)
		}
	}
}

func TestFormatNum(t *testing.T) {
	for _, c := range []struct {
		in   float64
		want string
	}{{0, "0"}, {3, "3"}, {2.5, "2.5"}, {12000, "12k"}, {2.5e6, "2.5M"}, {3e9, "3G"}, {0.0002, "0.0002"}, {2e-5, "2e-05"}, {-1500000, "-1.5M"}} {
		if got := FormatNum(c.in); got != c.want {
			t.Errorf("FormatNum(%g) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for _, c := range []struct {
		in   float64
		want string
	}{{512, "512 B"}, {1536, "1.5 KiB"}, {48 << 20, "48 MiB"}, {1.5 * (1 << 30), "1.5 GiB"}} {
		if got := FormatBytes(c.in); got != c.want {
			t.Errorf("FormatBytes(%g) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestScale: ticks cover the data and map the range onto the pixels.
func TestScale(t *testing.T) {
	for _, c := range []struct {
		lo, hi float64
		log    bool
	}{{0, 1, false}, {1.7, 5.6, false}, {3, 3, false}, {0.02, 70, true}, {5, 6, true}, {-4, 13, false}} {
		s := newScale(c.lo, c.hi, 10, 110, c.log)
		if len(s.ticks) < 2 || s.ticks[0] > c.lo || s.ticks[len(s.ticks)-1] < c.hi {
			t.Errorf("%+v: ticks %v do not cover the data", c, s.ticks)
		}
		if p := s.px(s.ticks[0]); math.Abs(p-10) > 1e-9 {
			t.Errorf("%+v: first tick at %g px, want 10", c, p)
		}
		if p := s.px(s.ticks[len(s.ticks)-1]); math.Abs(p-110) > 1e-9 {
			t.Errorf("%+v: last tick at %g px, want 110", c, p)
		}
		if c.log && s.px(c.hi) <= s.px(c.lo) {
			t.Errorf("%+v: log scale not increasing", c)
		}
	}
}

var polyRe = regexp.MustCompile(`<polyline class="series[^"]*" data-series="([^"]*)" data-n="(\d+)" stroke="[^"]*" points="([^"]*)"`)

// polylines returns, per series name, the data-n attribute and the number
// of points actually drawn.
func polylines(t *testing.T, svg string) map[string][2]int {
	t.Helper()
	out := map[string][2]int{}
	for _, m := range polyRe.FindAllStringSubmatch(svg, -1) {
		n, _ := strconv.Atoi(m[2])
		drawn := 0
		if m[3] != "" {
			drawn = len(strings.Fields(m[3]))
		}
		out[m[1]] = [2]int{n, drawn}
	}
	return out
}

func seq(n int, f func(i int) float64) (xs, ys []float64) {
	for i := range n {
		xs, ys = append(xs, float64(i+1)), append(ys, f(i))
	}
	return
}

func TestLineChart(t *testing.T) {
	x, decay := seq(50, func(i int) float64 { return 100 * math.Exp(-float64(i)/8) })
	_, flat := seq(50, func(i int) float64 { return 3 + float64(i%3) })
	_, holes := seq(50, func(i int) float64 {
		if i%10 == 0 {
			return math.NaN()
		}
		return float64(i)
	})
	xl, long := seq(3*MaxPoints+7, func(i int) float64 { return float64(i) })
	for _, c := range []struct {
		name   string
		x, y   []float64
		auto   bool
		wantN  int
		wantLg bool
	}{
		{"decade, auto", x, decay, true, 50, true},
		{"decade, linear", x, decay, false, 50, false},
		{"narrow", x, flat, true, 50, false},
		{"NaN left out", x, holes, true, 45, true},
		{"long, thinned", xl, long, false, 753, false}, // every 4th of 3007 (752 points) and the last
	} {
		svg := LineChart{ID: "c", X: Axis{Label: "step"}, Y: Axis{Label: "loss", Auto: c.auto},
			Series: []Series{{Name: "s", Color: "#000", X: c.x, Y: c.y}}}.SVG()
		got := polylines(t, svg)["s"]
		if got[0] != c.wantN || got[1] != c.wantN {
			t.Errorf("%s: data-n %d, points drawn %d, want %d", c.name, got[0], got[1], c.wantN)
		}
		if lg := strings.Contains(svg, `data-log-y="true"`); lg != c.wantLg {
			t.Errorf("%s: log scale %v, want %v", c.name, lg, c.wantLg)
		}
		if !strings.Contains(svg, ">step<") || !strings.Contains(svg, ">loss") {
			t.Errorf("%s: axis labels missing", c.name)
		}
	}
}

func TestLineChartEmpty(t *testing.T) {
	svg := LineChart{ID: "c"}.SVG()
	if !strings.Contains(svg, "no data yet") || strings.Contains(svg, "<polyline") {
		t.Errorf("empty chart: %s", svg)
	}
}

// TestLineChartEscapes: series names reach the page as text, not markup.
func TestLineChartEscapes(t *testing.T) {
	svg := LineChart{ID: "c", Series: []Series{{Name: `<script>"x"`, Color: "#000", X: []float64{1}, Y: []float64{1}}}}.SVG()
	if strings.Contains(svg, "<script>") {
		t.Errorf("name not escaped: %s", svg)
	}
}

// A learning rate's axis has distinct tick labels: 0.00196 … 0.00204 all
// read "0.002" before.
func TestTickLabelsDistinct(t *testing.T) {
	for _, c := range [][2]float64{{0.00196, 0.00204}, {1.9995e-3, 2.0005e-3}, {2e-4, 2e-3}, {0.5, 0.5001}, {1e6, 1.00001e6}} {
		s := newScale(c[0], c[1], 10, 110, false)
		seen := map[string]bool{}
		for _, l := range s.tickText {
			if seen[l] {
				t.Errorf("[%g, %g]: ticks %v", c[0], c[1], s.tickText)
				break
			}
			seen[l] = true
		}
	}
}
