package plan

import "strings"

// divisors lists the divisors of n in increasing order.
func divisors(n int) []int {
	var small, large []int
	for d := 1; d*d <= n; d++ {
		if n%d == 0 {
			small = append(small, d)
			if d*d != n {
				large = append(large, n/d)
			}
		}
	}
	for i := len(large) - 1; i >= 0; i-- {
		small = append(small, large[i])
	}
	return small
}

// allOrders lists the 24 rank orders, DefaultOrder first.
func allOrders() []string {
	axes := []string{"tp", "cp", "dp", "pp"}
	var out []string
	var rec func(prefix []string, rest []string)
	rec = func(prefix, rest []string) {
		if len(rest) == 0 {
			out = append(out, strings.Join(prefix, "-"))
			return
		}
		for i := range rest {
			next := append(append([]string(nil), rest[:i]...), rest[i+1:]...)
			rec(append(prefix, rest[i]), next)
		}
	}
	rec(nil, axes)
	return out
}

// orders lists one rank order per distinct placement of the groups of the
// shape in p (or the pinned order).
// A pipelined model with experts takes only orders with pp last
// (expertStepRule).
func (s *searcher) orders(p Plan) []orderOpt {
	ppLast := s.job.Model.moe() && p.PP > 1
	if s.fix.Pinned("order") {
		p.Order = s.fix.plan.Order
		if ppLast && !pipelineLast(p.Order) {
			s.reject(rejMoEOrder, 1)
			return nil
		}
		return []orderOpt{{p.Order, place(p, s.job.Cluster.DevicesPerNode)}}
	}
	var out []orderOpt
	for _, o := range allOrders() {
		if ppLast && !pipelineLast(o) {
			continue
		}
		p.Order = o
		pl := place(p, s.job.Cluster.DevicesPerNode)
		dup := false
		for _, q := range out {
			if q.pl == pl {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, orderOpt{o, pl})
		}
	}
	return out
}

// schedules lists (schedule, vpp) pairs for pp stages, with the parameter
// counts of their partition: without a pipeline only 1f1b (the schedule is
// moot); with one, gpipe and 1f1b at vpp=1, zb-h1 only when pinned (no
// published run validates it and none of the frameworks the planner emits
// for runs it: torchtitan's zero-bubble schedules are interleaved or
// V-shaped; so it is costed on request, not proposed), and interleaved at every vpp ≥ 2
// whose pp·vpp chunks divide the layers L, or L+1 or L+2 (the split is then
// even, or uneven by one layer at one or both ends: Megatron-Core's
// account-for-loss and account-for-embedding splits). Any other vpp that
// splits the layers is searched when pinned.
func (s *searcher) schedules(tp, pp int) []schedOpt {
	var out []schedOpt
	L := s.job.Model.Layers
	add := func(sc Schedule, v int) {
		if !s.fix.allows("schedule", string(sc)) || !s.fix.allowsInt("vpp", v) {
			return
		}
		pt, ok := newPartition(L, pp, v)
		if !ok || (sc == DualPipeV && !splittable(L, pp, 2)) {
			return
		}
		so := schedOpt{s: sc, v: v, params: s.job.tpParams(tp, pt), idx: len(out)}
		if q := (Plan{PP: pp, VPP: v, Schedule: sc}); s.job.useGeneral(q) {
			so.params.lay = s.job.newLayout(q)
		}
		out = append(out, so)
	}
	if pp == 1 {
		add(OneFOneB, 1)
		if s.fix.Pinned("schedule") {
			add(GPipe, 1)
			add(ZBH1, 1)
		}
		return out
	}
	add(GPipe, 1)
	add(OneFOneB, 1)
	if s.fix.Pinned("schedule") {
		add(ZBH1, 1)
		if pp%2 == 0 {
			add(DualPipe, 1)
		}
		add(DualPipeV, 1)
	}
	if s.fix.Pinned("vpp") {
		if v := s.fix.plan.VPP; v >= 2 {
			add(Interleaved, v)
			if !splittable(L, pp, v) {
				s.reject(rejLayers, 1)
			}
		}
		return out
	}
	for _, v := range interleaveDegrees(L, pp) {
		add(Interleaved, v)
	}
	return out
}

// interleaveDegrees lists, in increasing order, the vpp ≥ 2 for which
// pp·vpp divides L, L+1 or L+2.
func interleaveDegrees(L, pp int) []int {
	var out []int
	for v := 2; pp*v <= L+2; v++ {
		if c := pp * v; L%c == 0 || (L+1)%c == 0 || (L+2)%c == 0 {
			out = append(out, v)
		}
	}
	return out
}

// precisions lists the precisions to search: those the device supports,
// fp16 and fp8 only when pinned (fp16's costs equal bf16's; fp8 changes
// the numerics, so the search defaults to bf16 and a user asks for fp8
// with --fix precision=fp8).
func (s *searcher) precisions() []Precision {
	if s.fix.Pinned("precision") {
		p := s.fix.plan.Precision
		if !(s.job.Cluster.Accel.Peak[p] > 0) {
			s.reject(rejPrecision, 1)
			return nil
		}
		return []Precision{p}
	}
	var out []Precision
	for _, p := range s.job.Cluster.supported() {
		if p != FP16 && p != FP8 {
			out = append(out, p)
		}
	}
	return out
}

// bools lists the values of an on/off key: both when allowed, else off.
func (s *searcher) bools(key string, allowOn bool) []bool {
	var out []bool
	for _, b := range []bool{false, true} {
		if (b && !allowOn) || !s.fix.allows(key, onOff(b)) {
			continue
		}
		out = append(out, b)
	}
	return out
}

// zeros lists the ZeRO stages to search for n = dp·cp replicas.
func (s *searcher) zeros(n int) []int {
	var out []int
	for z := 0; z <= 3; z++ {
		if (n == 1 && z > 0 && !s.fix.Pinned("zero")) || !s.fix.allowsInt("zero", z) {
			continue
		}
		out = append(out, z)
	}
	return out
}
