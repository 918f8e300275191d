package viz

import (
	"fmt"
	"math"
	"strings"
)

// Seg is one part of a stacked bar.
type Seg struct {
	Name  string
	Value float64
}

// Bar is one stacked bar: a rank's measured memory, its prediction, or a
// step-time split.
type Bar struct {
	Label  string
	Rank   int
	Kind   string // "measured", "predicted", "time", ...: the data-kind attribute
	Segs   []Seg
	Marker float64 // a tick at this value (e.g. the peak of all tags at once); 0: none
}

func (b Bar) total() float64 {
	t := 0.0
	for _, s := range b.Segs {
		t += s.Value
	}
	return t
}

// BarChart draws horizontal stacked bars against a limit (the device
// budget), one row per bar, with a legend of the segment names.
type BarChart struct {
	ID     string
	Unit   string // "bytes" or "s"
	Bars   []Bar
	Limit  float64 // a vertical line (0: none)
	Legend []string
	W      int
}

// colors per segment name; the same everywhere so that pages read alike.
var segColors = map[string]string{
	"param": "#4e79a7", "grad": "#f28e2b", "optim": "#e15759", "act": "#76b7b2",
	"workspace": "#59a14f", "comm": "#edc948", "reserved": "#bab0ac",
	"compute": "#4e79a7", "comm exposed": "#e15759", "bubble": "#bab0ac", "misc": "#9c755f",
	"compute + misc": "#4e79a7",
}

func colorOf(name string) string {
	if c, ok := segColors[name]; ok {
		return c
	}
	return "#888888"
}

// FormatValue writes a value in the chart's unit: bytes as KiB/MiB/GiB,
// seconds as s or ms.
func FormatValue(v float64, unit string) string {
	switch unit {
	case "bytes":
		return FormatBytes(v)
	case "s":
		if math.Abs(v) < 1 {
			return trimZeros(v*1e3, 1) + " ms"
		}
		return trimZeros(v, 2) + " s"
	}
	return FormatNum(v)
}

// FormatBytes writes bytes in binary units.
func FormatBytes(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1<<30:
		return trimZeros(v/(1<<30), 2) + " GiB"
	case a >= 1<<20:
		return trimZeros(v/(1<<20), 1) + " MiB"
	case a >= 1<<10:
		return trimZeros(v/(1<<10), 1) + " KiB"
	}
	return trimZeros(v, 0) + " B"
}

// unitScale is a linear scale from 0 to top with nice ticks in the unit
// that suits top (GiB, MiB, KiB or B; s or ms), labelled with it.
func unitScale(unit string, top, p0, p1 float64) scale {
	div, suffix := 1.0, ""
	switch {
	case unit == "bytes":
		div, suffix = 1, " B"
		for _, u := range []struct {
			d float64
			s string
		}{{1 << 30, " GiB"}, {1 << 20, " MiB"}, {1 << 10, " KiB"}} {
			if top >= u.d {
				div, suffix = u.d, u.s
				break
			}
		}
	case unit == "s" && top < 1:
		div, suffix = 1e-3, " ms"
	case unit == "s":
		suffix = " s"
	}
	xs := newScale(0, math.Max(top/div, 1e-12), p0, p1, false)
	for i, t := range xs.ticks {
		xs.ticks[i] = t * div
		xs.tickText[i] += suffix
	}
	xs.lo, xs.hi = xs.lo*div, xs.hi*div
	return xs
}

const rowH, barH, barPadL, barPadR, barTop = 26, 16, 110, 60, 34

// offScale: a limit more than this many times the longest bar is not drawn.
const offScale = 4

// SVG draws the bars. Every segment is a rect with data-rank, data-kind,
// data-tag and data-value (the exact value, for tests and tooltips).
func (c BarChart) SVG() string {
	w := c.W
	if w == 0 {
		w = 560
	}
	h := barTop + rowH*len(c.Bars) + padB
	var b strings.Builder
	fmt.Fprintf(&b, `<svg id="%s" class="chart bars" viewBox="0 0 %d %d" width="%d" height="%d" role="img">`, esc(c.ID), w, h, w, h)
	if len(c.Bars) == 0 {
		fmt.Fprintf(&b, `<text x="%d" y="%d" class="empty">no data yet</text></svg>`, w/2-36, h/2)
		return b.String()
	}
	top := 0.0
	for _, bar := range c.Bars {
		top = math.Max(top, math.Max(bar.total(), bar.Marker))
	}
	// A limit far beyond the bars would flatten them: it is then named,
	// not drawn.
	limitOn := c.Limit > 0 && c.Limit <= offScale*top
	if limitOn {
		top = math.Max(top, c.Limit)
	}
	xs := unitScale(c.Unit, top, barPadL, float64(w-barPadR))
	c.barAxis(&b, xs, h)
	for i, bar := range c.Bars {
		c.bar(&b, bar, xs, float64(barTop+i*rowH))
	}
	if c.Limit > 0 && !limitOn {
		fmt.Fprintf(&b, `<text class="tick limit-off" x="%d" y="%d" text-anchor="end" data-value="%s">budget %s (off scale) →</text>`,
			w-barPadR, barTop-8, exact(c.Limit), FormatValue(c.Limit, c.Unit))
	}
	if limitOn {
		x := xs.px(c.Limit)
		fmt.Fprintf(&b, `<line class="limit" x1="%.1f" x2="%.1f" y1="%d" y2="%d" data-value="%s"/>`, x, x, barTop-6, h-padB, exact(c.Limit))
		fmt.Fprintf(&b, `<text class="tick" x="%.1f" y="%d" text-anchor="end">budget %s</text>`, x-2, barTop-8, FormatValue(c.Limit, c.Unit))
	}
	c.legend(&b)
	b.WriteString(`</svg>`)
	return b.String()
}

func (c BarChart) barAxis(b *strings.Builder, xs scale, h int) {
	for i, t := range xs.ticks {
		x := xs.px(t)
		fmt.Fprintf(b, `<line class="grid" x1="%.1f" x2="%.1f" y1="%d" y2="%d"/>`, x, x, barTop, h-padB)
		fmt.Fprintf(b, `<text class="tick" x="%.1f" y="%d" text-anchor="middle">%s</text>`, x, h-padB+14, xs.tickText[i])
	}
}

func (c BarChart) bar(b *strings.Builder, bar Bar, xs scale, y float64) {
	fmt.Fprintf(b, `<text class="tick" x="%d" y="%.1f" text-anchor="end">%s</text>`, barPadL-6, y+barH-4, esc(bar.Label))
	x := 0.0
	for _, s := range bar.Segs {
		x0, x1 := xs.px(x), xs.px(x+s.Value)
		x += s.Value
		fmt.Fprintf(b, `<rect class="seg" data-rank="%d" data-kind="%s" data-tag="%s" data-value="%s" x="%.1f" y="%.1f" width="%.1f" height="%d" fill="%s"><title>%s %s: %s</title></rect>`,
			bar.Rank, esc(bar.Kind), esc(s.Name), exact(s.Value), x0, y, math.Max(0, x1-x0), barH, colorOf(s.Name),
			esc(bar.Label), esc(s.Name), FormatValue(s.Value, c.Unit))
	}
	fmt.Fprintf(b, `<text class="tick" x="%.1f" y="%.1f">%s</text>`, xs.px(x)+4, y+barH-4, FormatValue(x, c.Unit))
	if bar.Marker > 0 {
		m := xs.px(bar.Marker)
		fmt.Fprintf(b, `<line class="marker" data-rank="%d" data-value="%s" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f"><title>peak of all tags at once: %s</title></line>`,
			bar.Rank, exact(bar.Marker), m, m, y-3, y+barH+3, FormatValue(bar.Marker, c.Unit))
	}
}

// exact writes integers without exponent and other values with full precision.
func exact(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%g", v)
}

func (c BarChart) legend(b *strings.Builder) {
	x := barPadL
	for _, n := range c.Legend {
		fmt.Fprintf(b, `<rect x="%d" y="4" width="10" height="10" fill="%s"/><text class="legend" x="%d" y="13">%s</text>`, x, colorOf(n), x+13, esc(n))
		x += 22 + 7*len(n)
	}
}
