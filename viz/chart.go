package viz

import (
	"fmt"
	"html"
	"math"
	"strconv"
	"strings"
)

// Series is one line of a chart. X and Y have the same length; points with
// a non-finite Y (or Y <= 0 on a log axis) are left out.
type Series struct {
	Name    string
	Color   string
	X, Y    []float64
	Markers bool // draw a dot per point (sparse series such as validation loss)
}

// Axis labels a chart axis; Label carries the unit, e.g. "tokens/s".
type Axis struct {
	Label string
	Log   bool // log10 scale; chosen by LineChart.SVG when Auto is set
	Auto  bool // use a log scale when the data spans at least a decade
}

// LineChart is an x-y plot of one or more series.
type LineChart struct {
	ID     string // element id, also the prefix of the series' classes
	X, Y   Axis
	Series []Series
	W, H   int // pixels; zero takes 560x240
}

// MaxPoints bounds the points a series draws (a chart is under 500 pixels
// wide): longer series keep every k-th point and the last, so that a long
// run's page and the dashboard's frames stay small.
const MaxPoints = 1000

const (
	padL, padR, padT, padB = 64, 16, 24, 40
)

// scale maps data to pixels on one axis: linear, or linear in log10.
type scale struct {
	lo, hi   float64 // data range (log10 of it when log)
	p0, p1   float64 // pixel range
	log      bool
	ticks    []float64
	tickText []string
}

func (s scale) px(v float64) float64 {
	if s.log {
		v = math.Log10(v)
	}
	if s.hi == s.lo {
		return (s.p0 + s.p1) / 2
	}
	// In halves, so that a range as wide as ±1e308 does not overflow.
	return s.p0 + (v/2-s.lo/2)/(s.hi/2-s.lo/2)*(s.p1-s.p0)
}

// maxTicks bounds the ticks of an axis, whatever its range: with a range
// far wider than float64 can step through (1e300 to the next float), the
// tick loop would otherwise never end.
const maxTicks = 24

// newScale fits [lo, hi] with nice ticks: 1-2-5 steps on a linear axis,
// powers of ten on a log axis. Any finite range works, up to ±MaxFloat64;
// non-finite ends are clamped to it.
func newScale(lo, hi, p0, p1 float64, log bool) scale {
	s := scale{p0: p0, p1: p1, log: log}
	lo, hi = clampFinite(lo), clampFinite(hi)
	if log {
		a, b := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
		if a == b {
			b = a + 1
		}
		s.lo, s.hi = a, b
		step := math.Max(1, math.Ceil((b-a)/6))
		for e := a; e <= b+1e-9 && len(s.ticks) < maxTicks; e += step {
			v := math.Pow(10, e)
			s.ticks, s.tickText = append(s.ticks, v), append(s.tickText, FormatNum(v))
		}
		return s
	}
	if lo == hi {
		d := math.Max(1, math.Abs(lo)*0.1)
		lo, hi = clampFinite(lo-d), clampFinite(hi+d)
	}
	step := niceStep((hi/2 - lo/2) / 2.5) // (hi-lo)/5 without overflow
	s.lo, s.hi = math.Floor(lo/step)*step, math.Ceil(hi/step)*step
	if math.IsInf(s.lo, 0) {
		s.lo = lo
	}
	if math.IsInf(s.hi, 0) {
		s.hi = hi
	}
	for i := 0; len(s.ticks) < maxTicks; i++ {
		v := s.lo + float64(i)*step
		if v > s.hi+step*1e-9 || math.IsInf(v, 0) || (len(s.ticks) > 0 && v == s.ticks[len(s.ticks)-1]) {
			break
		}
		s.ticks, s.tickText = append(s.ticks, v), append(s.tickText, FormatNum(v))
	}
	s.tickText = distinctTicks(s.ticks, s.tickText, step)
	return s
}

// distinctTicks relabels ticks whose compact labels collide (a learning
// rate's 0.00196, 0.00198, 0.002 all read "0.002") with as many decimals
// as the step needs, then more until every label differs.
func distinctTicks(ticks []float64, text []string, step float64) []string {
	if !hasDuplicates(text) || !(step > 0) || math.Abs(step) < 1e-300 {
		return text
	}
	for d := max(0, int(-math.Floor(math.Log10(step)))); d <= 17; d++ {
		out := make([]string, len(ticks))
		for i, v := range ticks {
			out[i] = trimZeros(v, d)
		}
		if !hasDuplicates(out) {
			return out
		}
	}
	return text
}

func hasDuplicates(xs []string) bool {
	seen := map[string]bool{}
	for _, x := range xs {
		if seen[x] {
			return true
		}
		seen[x] = true
	}
	return false
}

// clampFinite maps ±Inf to ±MaxFloat64 and NaN to 0.
func clampFinite(v float64) float64 {
	switch {
	case math.IsNaN(v):
		return 0
	case math.IsInf(v, 1):
		return math.MaxFloat64
	case math.IsInf(v, -1):
		return -math.MaxFloat64
	}
	return v
}

// niceStep rounds x up to 1, 2 or 5 times a power of ten.
func niceStep(x float64) float64 {
	if x <= 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x*(1-1e-12) {
			return m * p
		}
	}
	return 10 * p
}

// FormatNum writes a number compactly: 1.5k, 2.3M, 0.0002 as 2e-4.
func FormatNum(v float64) string {
	a := math.Abs(v)
	switch {
	case v == 0:
		return "0"
	case a >= 1e12 || math.IsNaN(a):
		return strconv.FormatFloat(v, 'g', 2, 64)
	case a >= 1e9:
		return trimZeros(v/1e9, 1) + "G"
	case a >= 1e6:
		return trimZeros(v/1e6, 1) + "M"
	case a >= 1e4:
		return trimZeros(v/1e3, 1) + "k"
	case a >= 0.01:
		return trimZeros(v, 3)
	}
	return strconv.FormatFloat(v, 'g', 2, 64)
}

func trimZeros(v float64, prec int) string {
	s := strconv.FormatFloat(v, 'f', prec, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// usable reports whether a value can be drawn on the axis.
func usable(v float64, log bool) bool {
	return !math.IsNaN(v) && !math.IsInf(v, 0) && (!log || v > 0)
}

// ranges returns the data extent of all series.
func (c LineChart) ranges(logY bool) (x0, x1, y0, y1 float64, n int) {
	x0, y0 = math.Inf(1), math.Inf(1)
	x1, y1 = math.Inf(-1), math.Inf(-1)
	for _, s := range c.Series {
		for i, y := range s.Y {
			if !usable(y, logY) || !usable(s.X[i], false) {
				continue
			}
			x0, x1 = math.Min(x0, s.X[i]), math.Max(x1, s.X[i])
			y0, y1 = math.Min(y0, y), math.Max(y1, y)
			n++
		}
	}
	return
}

// wantLog reports whether every value is positive and they span a decade.
func (c LineChart) wantLog() bool {
	_, _, y0, y1, n := c.ranges(true)
	_, _, _, _, all := c.ranges(false)
	return n > 0 && n == all && y1/y0 >= 10
}

// SVG draws the chart: axes with ticks and unit labels, a legend, and a
// polyline per series whose data-n attribute counts its points.
func (c LineChart) SVG() string {
	w, h := c.W, c.H
	if w == 0 {
		w, h = 560, 240
	}
	logY := c.Y.Log || (c.Y.Auto && c.wantLog())
	x0, x1, y0, y1, n := c.ranges(logY)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg id="%s" class="chart" viewBox="0 0 %d %d" width="%d" height="%d" role="img" data-log-y="%t">`,
		esc(c.ID), w, h, w, h, logY)
	if n == 0 {
		fmt.Fprintf(&b, `<text x="%d" y="%d" class="empty">no data yet</text></svg>`, w/2-36, h/2)
		return b.String()
	}
	xs := newScale(x0, x1, padL, float64(w-padR), c.X.Log)
	ys := newScale(y0, y1, float64(h-padB), padT, logY)
	c.axes(&b, xs, ys, w, h, logY)
	for i, s := range c.Series {
		c.series(&b, s, i, xs, ys, logY)
	}
	c.legend(&b, w)
	b.WriteString(`</svg>`)
	return b.String()
}

func (c LineChart) axes(b *strings.Builder, xs, ys scale, w, h int, logY bool) {
	for i, t := range ys.ticks {
		y := ys.px(t)
		fmt.Fprintf(b, `<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/>`, padL, w-padR, y, y)
		fmt.Fprintf(b, `<text class="tick" x="%d" y="%.1f" text-anchor="end">%s</text>`, padL-4, y+4, ys.tickText[i])
	}
	for i, t := range xs.ticks {
		x := xs.px(t)
		fmt.Fprintf(b, `<line class="axis" x1="%.1f" x2="%.1f" y1="%d" y2="%d"/>`, x, x, h-padB, h-padB+4)
		fmt.Fprintf(b, `<text class="tick" x="%.1f" y="%d" text-anchor="middle">%s</text>`, x, h-padB+16, xs.tickText[i])
	}
	fmt.Fprintf(b, `<line class="axis" x1="%d" x2="%d" y1="%d" y2="%d"/>`, padL, w-padR, h-padB, h-padB)
	fmt.Fprintf(b, `<line class="axis" x1="%d" x2="%d" y1="%d" y2="%d"/>`, padL, padL, padT, h-padB)
	fmt.Fprintf(b, `<text class="label" x="%d" y="%d" text-anchor="middle">%s</text>`, (padL+w-padR)/2, h-6, esc(c.X.Label))
	yl := c.Y.Label
	if logY {
		yl += " (log)"
	}
	fmt.Fprintf(b, `<text class="label" transform="translate(14 %d) rotate(-90)" text-anchor="middle">%s</text>`, (padT+h-padB)/2, esc(yl))
}

func (c LineChart) series(b *strings.Builder, s Series, i int, xs, ys scale, logY bool) {
	pts := make([]byte, 0, 12*min(len(s.Y), MaxPoints+1))
	n := 0
	every := 1 + (len(s.Y)-1)/MaxPoints
	for j, y := range s.Y {
		if (j%every != 0 && j != len(s.Y)-1) || !usable(y, logY) || !usable(s.X[j], false) {
			continue
		}
		if n > 0 {
			pts = append(pts, ' ')
		}
		pts = strconv.AppendFloat(pts, xs.px(s.X[j]), 'f', 1, 64)
		pts = append(pts, ',')
		pts = strconv.AppendFloat(pts, ys.px(y), 'f', 1, 64)
		n++
	}
	fmt.Fprintf(b, `<polyline class="series s%d" data-series="%s" data-n="%d" stroke="%s" points="%s"/>`,
		i, esc(s.Name), n, s.Color, pts)
	if !s.Markers {
		return
	}
	for j, y := range s.Y {
		if usable(y, logY) && usable(s.X[j], false) {
			fmt.Fprintf(b, `<circle class="dot" cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s %s at %s</title></circle>`,
				xs.px(s.X[j]), ys.px(y), s.Color, esc(s.Name), FormatNum(y), FormatNum(s.X[j]))
		}
	}
}

func (c LineChart) legend(b *strings.Builder, w int) {
	x := padL + 8
	for _, s := range c.Series {
		fmt.Fprintf(b, `<rect x="%d" y="6" width="12" height="4" fill="%s"/><text class="legend" x="%d" y="12">%s</text>`,
			x, s.Color, x+16, esc(s.Name))
		x += 24 + 7*len(s.Name)
	}
}

func esc(s string) string { return html.EscapeString(s) }
