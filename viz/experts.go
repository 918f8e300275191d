package viz

import (
	"fmt"
	"html/template"
	"math"
	"strings"
)

// Routing panels of an MoE run (steps whose lines carry "experts"). For
// MoE block i of a step with loads L_e (the (token, slot) assignments its
// router gave expert e, before capacity) and drops D_e:
//
//	imbalance_i = max_e L_e / mean_e L_e      (1: perfectly balanced; E: one expert takes all)
//	dropped_i   = Σ_e D_e / Σ_e L_e           (0 when dropless)
//
// expertPanels draws both over the steps and the last step's per-expert
// load as a table shaded by L_e / mean; none when the run has no experts.
// A live page of an MoE run (Info.Experts > 0) has all three from the
// start, empty until the first step, since the dashboard patches only the
// panels its page already has.
func expertPanels(r *Run) []Panel {
	var xs []float64
	var steps []Step
	for _, s := range r.Steps {
		if s.Experts != nil && len(s.Experts.Layers) > 0 {
			xs, steps = append(xs, float64(s.Step)), append(steps, s)
		}
	}
	live := r.Live && r.Info.Experts > 0
	if len(steps) == 0 {
		if !live {
			return nil
		}
		empty := template.HTML(`<p class="empty">no step yet</p>`)
		return []Panel{{ID: "experts-balance", Title: "Expert load balance", Note: "the busiest expert's load over the mean, per MoE block", HTML: empty},
			{ID: "experts-dropped", Title: "Dropped tokens", Note: "assignments past an expert's capacity, per MoE block", HTML: empty},
			{ID: "experts-load", Title: "Tokens per expert", Wide: true, Note: "assignments per expert at the last step", HTML: empty}}
	}
	last := steps[len(steps)-1].Experts
	blocks := len(last.Layers)
	balance := LineChart{ID: "experts-balance-chart", X: Axis{Label: "step"}, Y: Axis{Label: "max / mean load"}}
	dropped := LineChart{ID: "experts-dropped-chart", X: Axis{Label: "step"}, Y: Axis{Label: "dropped (%)"}}
	anyDrop := false
	for i := range blocks {
		var bx, by, dy []float64
		for k, s := range steps {
			e := s.Experts
			if i >= len(e.Load) || i >= len(e.Layers) || e.Layers[i] != last.Layers[i] {
				continue // another model's line (a resumed run's first lines): not this block
			}
			imb, drop := routingOf(e.Load[i], at(e.Dropped, i))
			bx, by, dy = append(bx, xs[k]), append(by, imb), append(dy, 100*drop)
			anyDrop = anyDrop || drop > 0
		}
		name := fmt.Sprintf("block %d", last.Layers[i])
		color := seriesColor(i)
		balance.Series = append(balance.Series, Series{Name: name, Color: color, X: bx, Y: by})
		dropped.Series = append(dropped.Series, Series{Name: name, Color: color, X: bx, Y: dy})
	}
	n := len(steps)
	note := fmt.Sprintf("step %d: the busiest expert's load over the mean, per MoE block (1: balanced); aux loss %.4g", steps[n-1].Step, last.AuxLoss)
	ps := []Panel{{ID: "experts-balance", Title: "Expert load balance", Note: note, HTML: template.HTML(balance.SVG())}}
	if anyDrop || live {
		ps = append(ps, Panel{ID: "experts-dropped", Title: "Dropped tokens", Note: "assignments past an expert's capacity, per MoE block, in % of the block's (they pass through the residual)",
			HTML: template.HTML(dropped.SVG())})
	}
	ps = append(ps, Panel{ID: "experts-load", Title: "Tokens per expert", Wide: true,
		Note: fmt.Sprintf("step %d: assignments per expert (dropped ones in parentheses), shaded by load over the block's mean", steps[n-1].Step),
		HTML: template.HTML(loadTable(last.Layers, last.Load, last.Dropped))})
	return ps
}

// at is xs[i], or nil past its end.
func at(xs [][]int64, i int) []int64 {
	if i < len(xs) {
		return xs[i]
	}
	return nil
}

// routingOf is a block's imbalance (max over mean of load; 1 when it
// routed nothing) and the fraction of its assignments dropped.
func routingOf(load, drop []int64) (imbalance, dropped float64) {
	var sum, top, d int64
	for e, l := range load {
		sum += l
		top = max(top, l)
		if e < len(drop) {
			d += drop[e]
		}
	}
	if sum == 0 {
		return 1, 0
	}
	return float64(top) * float64(len(load)) / float64(sum), float64(d) / float64(sum)
}

// loadTable is one row per MoE block, one cell per expert: its load (its
// drops in parentheses), the cell's shade its load over the block's mean
// (white at the mean, blue below, red above, full at 0 and at twice it).
func loadTable(layers []int, load, drop [][]int64) string {
	var b strings.Builder
	b.WriteString(`<table class="experts"><tr><th>block</th>`)
	E := 0
	for _, l := range load {
		E = max(E, len(l))
	}
	for e := range E {
		fmt.Fprintf(&b, `<th>%d</th>`, e)
	}
	b.WriteString(`<th>max / mean</th></tr>`)
	for i, l := range load {
		if i >= len(layers) {
			break
		}
		var sum int64
		for _, v := range l {
			sum += v
		}
		mean := float64(sum) / float64(max(len(l), 1))
		fmt.Fprintf(&b, `<tr><th>%d</th>`, layers[i])
		ds := at(drop, i)
		for e, v := range l {
			r := 1.0
			if mean > 0 {
				r = float64(v) / mean
			}
			cell := FormatNum(float64(v))
			if e < len(ds) && ds[e] > 0 {
				cell += fmt.Sprintf(" (%s)", FormatNum(float64(ds[e])))
			}
			fmt.Fprintf(&b, `<td style="background:%s" data-load="%d">%s</td>`, shade(r), v, esc(cell))
		}
		imb, _ := routingOf(l, ds)
		fmt.Fprintf(&b, `<td>%.2f</td></tr>`, imb)
	}
	b.WriteString(`</table>`)
	return b.String()
}

// shade maps a load ratio r (load over mean) to a colour: white at 1,
// towards blue below and red above, saturating at 0 and 2.
func shade(r float64) string {
	t := math.Max(-1, math.Min(1, r-1)) // −1 … 1
	mix := func(c float64) int { return int(math.Round(255 - (255-c)*math.Abs(t))) }
	if t < 0 {
		return fmt.Sprintf("#%02x%02x%02x", mix(0x4e), mix(0x79), mix(0xa7))
	}
	return fmt.Sprintf("#%02x%02x%02x", mix(0xe1), mix(0x57), mix(0x59))
}

// seriesColor is the i-th colour of a palette of ten (Tableau's), cycled.
func seriesColor(i int) string {
	p := []string{"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"}
	return p[i%len(p)]
}
