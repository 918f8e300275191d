package viz

import (
	"math"
	"strings"
	"testing"

	"trellis/metrics"
)

// An MoE run gets the routing panels: the balance over steps (max/mean
// load per block), the drops when there are any, and the last step's
// table of tokens per expert; a dense run gets none of them.
func TestExpertPanels(t *testing.T) {
	step := func(n int, load, drop [][]int64) Step {
		return Step{Step: n, Loss: 1, Experts: &metrics.Experts{Layers: []int{1, 3}, Load: load, Dropped: drop, AuxLoss: 0.0125}}
	}
	r := &Run{Steps: []Step{
		step(1, [][]int64{{10, 10, 10, 10}, {40, 0, 0, 0}}, [][]int64{{0, 0, 0, 0}, {0, 0, 0, 0}}),
		step(2, [][]int64{{20, 10, 5, 5}, {16, 8, 8, 8}}, [][]int64{{4, 0, 0, 0}, {0, 0, 0, 0}}),
	}}
	if imb, drop := routingOf([]int64{20, 10, 5, 5}, []int64{4, 0, 0, 0}); imb != 2 || math.Abs(drop-0.1) > 1e-12 {
		t.Errorf("imbalance %v, dropped %v: want 2 (20 over a mean of 10) and 0.1 (4 of 40)", imb, drop)
	}
	if imb, _ := routingOf([]int64{40, 0, 0, 0}, nil); imb != 4 {
		t.Errorf("one expert taking all of 4: imbalance %v, want 4", imb)
	}
	ids := map[string]Panel{}
	for _, p := range Panels(r) {
		ids[p.ID] = p
	}
	for _, id := range []string{"experts-balance", "experts-dropped", "experts-load"} {
		if _, ok := ids[id]; !ok {
			t.Fatalf("no %q panel among %v", id, ids)
		}
	}
	bal := string(ids["experts-balance"].HTML)
	for _, want := range []string{"block 1", "block 3"} {
		if !strings.Contains(bal, want) {
			t.Errorf("the balance chart has no series %q", want)
		}
	}
	if !strings.Contains(ids["experts-balance"].Note, "aux loss 0.0125") {
		t.Errorf("note %q does not give the aux loss", ids["experts-balance"].Note)
	}
	tab := string(ids["experts-load"].HTML)
	for _, want := range []string{`data-load="20">20 (4)</td>`, `<td>2.00</td>`, `<td>1.60</td>`, "#ffffff"} {
		if !strings.Contains(tab, want) {
			t.Errorf("the load table lacks %q:\n%s", want, tab)
		}
	}
	// Without drops there is no drops panel; a dense run has no routing.
	r.Steps = r.Steps[:1]
	for _, p := range Panels(r) {
		if p.ID == "experts-dropped" {
			t.Error("a drops panel for a run that dropped nothing")
		}
	}
	r.Steps[0].Experts = nil
	for _, p := range Panels(r) {
		if strings.HasPrefix(p.ID, "experts") {
			t.Errorf("a dense run has the %q panel", p.ID)
		}
	}
	// A live page of an MoE run has the three panels before its first
	// step (the dashboard patches only panels its page has).
	live := &Run{Live: true, Info: Info{Experts: 8}}
	n := 0
	for _, p := range Panels(live) {
		if strings.HasPrefix(p.ID, "experts") {
			n++
		}
	}
	if n != 3 {
		t.Errorf("a live MoE page before its first step has %d routing panels, want 3", n)
	}
}

// trellis report --vs: the compare panel draws each run's validation loss
// (or, without one, its training loss over windows of 10 steps) and names
// the last value of each; without another run there is no such panel.
func TestComparePanel(t *testing.T) {
	v := func(x float64) *float64 { return &x }
	mine := []Step{{Step: 1, Loss: 3}, {Step: 2, Loss: 2.5, ValLoss: v(2.6)}, {Step: 3, Loss: 2, ValLoss: v(2.1)}}
	var other []Step
	for i := 1; i <= 15; i++ {
		other = append(other, Step{Step: i, Loss: float64(i)})
	}
	for _, p := range Panels(&Run{Steps: mine}) {
		if p.ID == "compare" {
			t.Fatal("a compare panel without another run")
		}
	}
	var cmp *Panel
	for _, p := range Panels(&Run{Steps: mine, Versus: []Versus{{Name: "dense", Steps: other}}}) {
		if p.ID == "compare" {
			cmp = &p
		}
	}
	if cmp == nil {
		t.Fatal("no compare panel")
	}
	// The other run's training loss over steps 1–10 and 11–15: 5.5 and 13.
	for _, want := range []string{"this run val 2.1000 at step 3", "dense train 13.0000 at step 15"} {
		if !strings.Contains(cmp.Note, want) {
			t.Errorf("note %q lacks %q", cmp.Note, want)
		}
	}
	if xs, ys, what := compareCurve(other); what != "train" || len(xs) != 2 || ys[0] != 5.5 || xs[0] != 10 {
		t.Errorf("windows of 10: %v %v %s", xs, ys, what)
	}
}
