package viz

import (
	"fmt"
	"html/template"
	"slices"
	"strings"
)

// Panel is one box of a page: a chart or a table.
type Panel struct {
	ID    string
	Title string
	Note  string // one line under the title: what is drawn, units
	Wide  bool   // spans the page's width
	HTML  template.HTML
}

// Panels renders every panel the run has data for, in page order.
func Panels(r *Run) []Panel {
	ps := []Panel{
		lossPanel(r), lrPanel(r), throughputPanel(r), mfuPanel(r), memoryPanel(r), stepTimePanel(r), planPanel(r),
	}
	ps = append(ps[:1], append(comparePanel(r), ps[1:]...)...)
	ps = append(ps, expertPanels(r)...)
	if r.Trace != nil {
		ps = append(ps, timelinePanel(r.Trace))
	}
	if r.Live || len(r.Samples) > 0 {
		ps = append(ps, samplesPanel(r))
	}
	return ps
}

func stepXs(steps []Step) []float64 {
	xs := make([]float64, len(steps))
	for i, s := range steps {
		xs[i] = float64(s.Step)
	}
	return xs
}

func pick(steps []Step, f func(Step) float64) []float64 {
	ys := make([]float64, len(steps))
	for i, s := range steps {
		ys[i] = f(s)
	}
	return ys
}

func lossPanel(r *Run) Panel {
	xs := stepXs(r.Steps)
	var vx, vy []float64
	for _, s := range r.Steps {
		if s.ValLoss != nil {
			vx, vy = append(vx, float64(s.Step)), append(vy, *s.ValLoss)
		}
	}
	c := LineChart{ID: "loss-chart", X: Axis{Label: "step"}, Y: Axis{Label: "loss (nats/token)", Auto: true},
		Series: []Series{{Name: "train", Color: "#4e79a7", X: xs, Y: pick(r.Steps, func(s Step) float64 { return s.Loss })}}}
	if len(vx) > 0 {
		c.Series = append(c.Series, Series{Name: "validation", Color: "#e15759", X: vx, Y: vy, Markers: true})
	}
	note := "cross-entropy per token; log scale when it spans a decade"
	if n := len(r.Steps); n > 0 {
		note = fmt.Sprintf("step %d: loss %.4f%s; %s", r.Steps[n-1].Step, r.Steps[n-1].Loss, lastVal(r.Steps), note)
	}

	return Panel{ID: "loss", Title: "Loss", Note: note, HTML: template.HTML(c.SVG())}
}

// comparePanel draws this run's validation loss beside each Versus run's
// (trellis report --vs); a run without validation steps is drawn by its
// training loss averaged over windows of 10 steps. None without Versus.
func comparePanel(r *Run) []Panel {
	if len(r.Versus) == 0 {
		return nil
	}
	runs := append([]Versus{{Name: "this run", Steps: r.Steps}}, r.Versus...)
	c := LineChart{ID: "compare-chart", X: Axis{Label: "step"}, Y: Axis{Label: "loss (nats/token)"}}
	var notes []string
	for i, o := range runs {
		xs, ys, what := compareCurve(o.Steps)
		c.Series = append(c.Series, Series{Name: o.Name, Color: seriesColor(i), X: xs, Y: ys, Markers: what == "val"})
		if n := len(xs); n > 0 {
			notes = append(notes, fmt.Sprintf("%s %s %.4f at step %g", o.Name, what, ys[n-1], xs[n-1]))
		}
	}
	return []Panel{{ID: "compare", Title: "Loss against other runs", HTML: template.HTML(c.SVG()),
		Note: strings.Join(notes, "; ") + " (val: validation loss; train: training loss averaged over 10 steps)"}}
}

// compareCurve is a run's validation losses ("val"), or its training
// loss averaged over windows of 10 steps ("train") when it has none.
func compareCurve(steps []Step) (xs, ys []float64, what string) {
	for _, s := range steps {
		if s.ValLoss != nil {
			xs, ys = append(xs, float64(s.Step)), append(ys, *s.ValLoss)
		}
	}
	if len(xs) > 0 {
		return xs, ys, "val"
	}
	const w = 10
	for i := 0; i < len(steps); i += w {
		j := min(i+w, len(steps))
		sum := 0.0
		for _, s := range steps[i:j] {
			sum += s.Loss
		}
		xs, ys = append(xs, float64(steps[j-1].Step)), append(ys, sum/float64(j-i))
	}
	return xs, ys, "train"
}

// lastVal is ", val V (step S)" for the last validation loss of steps
// ("" when none).
func lastVal(steps []Step) string {
	for i := len(steps) - 1; i >= 0; i-- {
		if v := steps[i].ValLoss; v != nil {
			return fmt.Sprintf(", val %.4f (step %d)", *v, steps[i].Step)
		}
	}
	return ""
}

func lrPanel(r *Run) Panel {
	c := LineChart{ID: "lr-chart", X: Axis{Label: "step"}, Y: Axis{Label: "learning rate"},
		Series: []Series{{Name: "lr", Color: "#59a14f", X: stepXs(r.Steps), Y: pick(r.Steps, func(s Step) float64 { return s.LR })}}}
	return Panel{ID: "lr", Title: "Learning rate", Note: "the schedule's value at each step", HTML: template.HTML(c.SVG())}
}

func throughputPanel(r *Run) Panel {
	tps := pick(r.Steps, func(s Step) float64 { return s.TokensPerS })
	c := LineChart{ID: "tps-chart", X: Axis{Label: "step"}, Y: Axis{Label: "tokens/s"},
		Series: []Series{{Name: "tokens/s", Color: "#f28e2b", X: stepXs(r.Steps), Y: tps}}}
	note := "all ranks together"
	if len(tps) > 0 {
		note = fmt.Sprintf("median %s tokens/s, all ranks together", FormatNum(medianOf(tps)))
	}
	return Panel{ID: "throughput", Title: "Throughput", Note: note, HTML: template.HTML(c.SVG())}
}

func mfuPanel(r *Run) Panel {
	mfu := pick(r.Steps, func(s Step) float64 { return 100 * s.MFU })
	c := LineChart{ID: "mfu-chart", X: Axis{Label: "step"}, Y: Axis{Label: "MFU (%)"},
		Series: []Series{{Name: "MFU", Color: "#b07aa1", X: stepXs(r.Steps), Y: mfu}}}
	note := "model FLOPs over the peak of the cores in use"
	if len(mfu) > 0 {
		note = fmt.Sprintf("median %.1f%%; %s", medianOf(mfu), note)
	}
	return Panel{ID: "mfu", Title: "MFU", Note: note, HTML: template.HTML(c.SVG())}
}

func medianOf(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// MemoryBars is the last step's peak bytes per rank and tag, each followed
// by the rank's predicted bar when the step carries a prediction.
func MemoryBars(steps []Step) []Bar {
	if len(steps) == 0 {
		return nil
	}
	last := steps[len(steps)-1]
	var bars []Bar
	tags := Tags()
	for _, rk := range last.Ranks {
		m := Bar{Label: fmt.Sprintf("rank %d", rk.Rank), Rank: rk.Rank, Kind: "measured", Marker: float64(rk.Peak)}
		for _, t := range tags {
			m.Segs = append(m.Segs, Seg{Name: t, Value: float64(rk.Tag(t))})
		}
		bars = append(bars, m)
		pred := rk.Predicted
		if pred == nil {
			pred = last.Predicted
		}
		if pred != nil {
			p := Bar{Label: fmt.Sprintf("rank %d plan", rk.Rank), Rank: rk.Rank, Kind: "predicted"}
			for _, t := range tags {
				p.Segs = append(p.Segs, Seg{Name: t, Value: float64(pred.Tag(t))})
			}
			bars = append(bars, p)
		}
	}
	return bars
}

func memoryPanel(r *Run) Panel {
	c := BarChart{ID: "memory-chart", Unit: "bytes", Bars: MemoryBars(r.Steps), Limit: float64(r.budget()), Legend: Tags()}
	note := "peak bytes per tag since the start (the tick: the peak of all tags at once)"
	if r.budget() > 0 {
		note += "; the line: the device budget"
	}
	return Panel{ID: "memory", Title: "Memory per rank", Note: note, HTML: template.HTML(c.SVG())}
}

func planPanel(r *Run) Panel {
	var b strings.Builder
	in := r.Info
	b.WriteString(`<table class="kv">`)
	row := func(k, v string) {
		if v != "" && v != "0" {
			fmt.Fprintf(&b, `<tr><th>%s</th><td>%s</td></tr>`, esc(k), esc(v))
		}
	}
	row("plan", in.Plan)
	row("ranks", fmt.Sprint(in.Ranks))
	row("model", in.Model)
	row("parameters", FormatNum(float64(in.Params)))
	row("tokens/step", fmt.Sprint(in.TokensPerStep))
	if b := r.budget(); b > 0 {
		row("device budget", FormatBytes(float64(b)))
	}
	if in.ToStep > 0 {
		row("steps", fmt.Sprintf("%d..%d", in.FromStep+1, in.ToStep))
	}
	if !r.Live { // a live page's header says it, and the panel stays as it is
		row("status", r.Status)
	}
	b.WriteString(`</table>`)
	b.WriteString(meshTable(in.Groups))
	return Panel{ID: "plan", Title: "Plan and mesh", Note: "which rank is in which group of each mesh axis", HTML: template.HTML(b.String())}
}

// meshTable lists, per axis, its groups' ranks.
func meshTable(groups map[string][][]int) string {
	if len(groups) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(`<table class="mesh"><tr><th>axis</th><th>groups (ranks)</th></tr>`)
	for _, ax := range []string{"pp", "dp", "cp", "tp"} {
		gs, ok := groups[ax]
		if !ok || (ax != "dp" && len(gs) > 0 && len(gs[0]) < 2) {
			continue // an axis of size 1: every rank alone in its group
		}
		fmt.Fprintf(&b, `<tr data-axis="%s"><th>%s</th><td>`, ax, ax)
		for i, g := range gs {
			fmt.Fprintf(&b, `<span class="group" data-group="%d">%s%d: %s</span> `, i, ax, i, esc(fmt.Sprint(g)))
		}
		b.WriteString(`</td></tr>`)
	}
	b.WriteString(`</table>`)
	return b.String()
}

// MaxSamples is how many of the latest samples a page shows.
const MaxSamples = 5

func samplesPanel(r *Run) Panel {
	var b strings.Builder
	if len(r.Samples) == 0 {
		b.WriteString(`<p class="empty">no samples yet</p>`)
	}
	for i := len(r.Samples) - 1; i >= 0 && i >= len(r.Samples)-MaxSamples; i-- {
		s := r.Samples[i]
		fmt.Fprintf(&b, `<div class="sample" data-step="%d"><h3>step %d</h3><pre>%s</pre></div>`, s.Step, s.Step, esc(s.Text))
	}
	return Panel{ID: "samples", Title: "Samples", Wide: true, Note: "generated text, latest first", HTML: template.HTML(b.String())}
}
