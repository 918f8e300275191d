package plan

import (
	"math"
	"strings"
)

// Two plans that differ only in the rank order or in the number of
// interleaved chunks, and predict step times within sameTime and memory
// within sameMemory of each other (relative), are one choice for a user:
// vpp=40 and vpp=41 of a 80-layer model differ by 0.004% of a step. The
// faster is listed, the other is its variant.
const (
	sameTime   = 5e-4
	sameMemory = 1e-2
)

// sameCost is the relative difference under which two step times are one
// (a tie: the same cost reached through another shape, as dp=8 and
// dp=2,cp=4 of a job whose every term is the same), well below any
// difference the model means.
const sameCost = 1e-9

// sameStep reports step times that tie.
func sameStep(a, b float64) bool { return math.Abs(a-b) <= sameCost*math.Max(math.Abs(a), math.Abs(b)) }

// simpler orders plans on a tie toward the simpler: fewer axes above 1
// (dp, tp, pp, cp, ep, etp), then smaller tp, pp, cp, then fewer
// interleaved chunks; negative when a is simpler, 0 when neither is.
func simpler(a, b Plan) int {
	axes := func(p Plan) int {
		ep, etp := p.Experts()
		n := 0
		for _, v := range []int{p.DP, p.TP, p.PP, p.CP, ep, etp} {
			if v > 1 {
				n++
			}
		}
		return n
	}
	for _, d := range [][2]int{{axes(a), axes(b)}, {a.TP, b.TP}, {a.PP, b.PP}, {a.CP, b.CP}, {a.VPP, b.VPP}} {
		if d[0] != d[1] {
			return d[0] - d[1]
		}
	}
	return 0
}

// equivalent reports two such estimates, or two of identical cost: the
// same step time (sameStep) and the same memory, whatever their shapes
// (one row, the simpler in front).
func equivalent(a, b Estimate) bool {
	if sameStep(a.Time.Step, b.Time.Step) && a.Memory.Total == b.Memory.Total {
		return true
	}
	if math.Abs(a.Time.Step-b.Time.Step) > sameTime*a.Time.Step ||
		math.Abs(float64(a.Memory.Total-b.Memory.Total)) > sameMemory*float64(a.Memory.Total) {
		return false
	}
	q := b.Plan
	q.Order, q.VPP = a.Plan.Order, a.Plan.VPP
	return q == a.Plan
}

// merge folds e into a kept plan it is equivalent to (the better of the
// two stays in front, the other becomes a variant) and reports whether it
// did.
func (s *searcher) merge(e Estimate) bool {
	ps := s.res.Plans
	for i := range ps {
		if !equivalent(ps[i], e) {
			continue
		}
		if better(e, ps[i]) {
			e.Variants = append(ps[i].Variants, ps[i].Plan)
			ps[i] = e
			for ; i > 0 && better(ps[i], ps[i-1]); i-- {
				ps[i], ps[i-1] = ps[i-1], ps[i]
			}
		} else {
			ps[i].Variants = append(ps[i].Variants, e.Plan)
		}
		return true
	}
	return false
}

// finite reports a prediction with finite numbers (a cluster whose
// bandwidths or peaks are near zero makes them infinite).
func finite(e Estimate) bool {
	return !math.IsInf(e.Time.Step, 0) && !math.IsNaN(e.Time.Step) && e.Memory.Total >= 0
}

// VariantNote lists what the variants of e change, e.g. "order=tp-dp-cp-pp;
// vpp=41" ("" when there are none).
func (e Estimate) VariantNote() string {
	var parts []string
	for _, v := range e.Variants {
		var diff []string
		for _, k := range Keys() {
			if v.Get(k) != e.Plan.Get(k) {
				diff = append(diff, k+"="+v.Get(k))
			}
		}
		parts = append(parts, strings.Join(diff, ","))
	}
	return strings.Join(parts, "; ")
}
