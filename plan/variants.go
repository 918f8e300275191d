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

// equivalent reports two such estimates.
func equivalent(a, b Estimate) bool {
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
