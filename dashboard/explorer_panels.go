package dashboard

import (
	"fmt"
	"html/template"
	"strings"

	"trellis/plan"
	"trellis/viz"
)

// plansPanel is the ranked table; each key=value links to the same search
// with that key pinned as well.
func plansPanel(in PlanInputs, job plan.Job, res plan.Result) viz.Panel {
	var b strings.Builder
	b.WriteString(`<table id="plans-table"><tr><th>#</th><th>plan (click a key to pin it)</th><th class="num">step</th><th class="num">tokens/s</th><th class="num">MFU</th><th class="num">memory / budget</th><th>CPU engine</th></tr>`)
	for i, e := range res.Plans {
		cls := ""
		if i == 0 {
			cls = ` class="best"`
		}
		fmt.Fprintf(&b, `<tr%s data-plan="%s"><td>%d</td><td>`, cls, template.HTMLEscapeString(e.Plan.String()), i+1)
		for _, kv := range strings.Split(e.Plan.String(), ",") {
			fmt.Fprintf(&b, `<a class="pin" href="%s">%s</a> `, template.HTMLEscapeString(in.query(addPin(in.Fix, kv))), template.HTMLEscapeString(kv))
		}
		fmt.Fprintf(&b, `</td><td class="num">%s</td><td class="num">%s</td><td class="num">%.1f%%</td><td class="num">%s / %s</td>`,
			viz.FormatValue(e.Time.Step, "s"), viz.FormatNum(e.TokensPerS), 100*e.MFU,
			viz.FormatBytes(float64(e.Memory.Total)), viz.FormatBytes(float64(e.Memory.Budget)))
		b.WriteString(engineCell(job, e.Plan) + `</tr>`)
	}
	b.WriteString(`</table>`)
	return viz.Panel{ID: "plans", Title: "Top plans", Wide: true,
		Note: "the plans that fit device memory, fastest predicted step first", HTML: template.HTML(b.String())}
}

// addPin adds key=value to the pinned keys, replacing that key's old value.
func addPin(fix, kv string) string {
	key, _, _ := strings.Cut(kv, "=")
	var out []string
	for _, p := range strings.Split(fix, ",") {
		if k, _, _ := strings.Cut(strings.TrimSpace(p), "="); k != "" && k != key {
			out = append(out, strings.TrimSpace(p))
		}
	}
	return strings.Join(append(out, kv), ",")
}

// memTags is the predicted memory by the device tags, then the runtime
// reserve (which Trellis does not allocate); together they are Total.
func memTags(m plan.Memory) []viz.Seg {
	var segs []viz.Seg
	bt := m.ByTag()
	for _, t := range viz.Tags() {
		segs = append(segs, viz.Seg{Name: t, Value: float64(bt[t])})
	}
	return append(segs, viz.Seg{Name: "reserved", Value: float64(m.Reserved)})
}

func planMemoryPanel(res plan.Result) viz.Panel {
	c := viz.BarChart{ID: "plan-memory-chart", Unit: "bytes", Limit: float64(res.Plans[0].Memory.Budget),
		Legend: append(viz.Tags(), "reserved")}
	for i, e := range res.Plans {
		c.Bars = append(c.Bars, viz.Bar{Label: fmt.Sprintf("#%d", i+1), Rank: i, Kind: "predicted", Segs: memTags(e.Memory)})
	}
	return viz.Panel{ID: "plan-memory", Title: "Memory per device", Wide: true,
		Note: "predicted peak of the most loaded device, by tag; the line: the device's memory", HTML: template.HTML(c.SVG())}
}

func planTimePanel(res plan.Result) viz.Panel {
	c := viz.BarChart{ID: "plan-time-chart", Unit: "s", Legend: []string{"compute", "comm exposed", "bubble", "misc"}}
	for i, e := range res.Plans {
		t := e.Time
		c.Bars = append(c.Bars, viz.Bar{Label: fmt.Sprintf("#%d", i+1), Rank: i, Kind: "time", Segs: []viz.Seg{
			{Name: "compute", Value: t.Compute}, {Name: "comm exposed", Value: t.CommExposed},
			{Name: "bubble", Value: t.Bubble}, {Name: "misc", Value: t.Misc}}})
	}
	return viz.Panel{ID: "plan-time", Title: "Step time", Wide: true,
		Note: "T_step = compute + exposed communication + pipeline bubble + misc (predicted)", HTML: template.HTML(c.SVG())}
}

// pinnedPanel compares the best plan under the pinned keys with the best
// plan overall: the keys that differ, step time and memory.
func pinnedPanel(fix string, job plan.Job, pinned, free plan.Estimate) viz.Panel {
	var b strings.Builder
	fmt.Fprintf(&b, `<table id="pinned-table"><tr><th>key</th><th>pinned (%s)</th><th>best overall</th></tr>`, template.HTMLEscapeString(fix))
	for _, k := range plan.Keys() {
		a, c := pinned.Plan.Get(k), free.Plan.Get(k)
		cls := ""
		if a != c {
			cls = ` class="changed"`
		}
		fmt.Fprintf(&b, `<tr%s data-key="%s"><th>%s</th><td>%s</td><td>%s</td></tr>`, cls, k, k, template.HTMLEscapeString(a), template.HTMLEscapeString(c))
	}
	row := func(name, a, c string) {
		fmt.Fprintf(&b, `<tr><th>%s</th><td>%s</td><td>%s</td></tr>`, name, a, c)
	}
	row("step time", viz.FormatValue(pinned.Time.Step, "s"), viz.FormatValue(free.Time.Step, "s"))
	row("tokens/s", viz.FormatNum(pinned.TokensPerS), viz.FormatNum(free.TokensPerS))
	row("memory", viz.FormatBytes(float64(pinned.Memory.Total)), viz.FormatBytes(float64(free.Memory.Total)))
	fmt.Fprintf(&b, `<tr><th>CPU engine</th>%s%s</tr>`, engineCell(job, pinned.Plan), engineCell(job, free.Plan))
	b.WriteString(`</table>`)
	note := "pinning costs nothing: the best plan already has these keys"
	if free.Time.Step > 0 && pinned.Time.Step > free.Time.Step {
		note = fmt.Sprintf("pinning makes the best step %.1f%% slower", 100*(pinned.Time.Step/free.Time.Step-1))
	}
	return viz.Panel{ID: "pinned", Title: "What pinning changes", Wide: true, Note: note, HTML: template.HTML(b.String())}
}

// engineCell says whether the Trellis engine (on CPU) runs p: "runs", or
// "no" with plan.EngineRefusals' reasons (also as the cell's title).
func engineCell(job plan.Job, p plan.Plan) string {
	r := job.EngineRefusals(p)
	if len(r) == 0 {
		return `<td class="engine-runs">runs</td>`
	}
	why := template.HTMLEscapeString(strings.Join(r, "; "))
	return fmt.Sprintf(`<td class="engine-refused" title="%s">no: %s</td>`, why, why)
}
