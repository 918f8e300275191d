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
func (s *searcher) orders(p Plan) []orderOpt {
	if s.fix.Pinned("order") {
		p.Order = s.fix.plan.Order
		return []orderOpt{{p.Order, place(p, s.job.Cluster.DevicesPerNode)}}
	}
	var out []orderOpt
	for _, o := range allOrders() {
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

// schedules lists (schedule, vpp) pairs for pp stages: without a pipeline
// only 1f1b (the schedule is moot); with one, gpipe and 1f1b at vpp=1 and
// interleaved at every vpp ≥ 2 with pp·vpp dividing the layers.
func (s *searcher) schedules(pp int) []schedOpt {
	var out []schedOpt
	add := func(sc Schedule, v int) {
		if s.fix.allows("schedule", string(sc)) && s.fix.allowsInt("vpp", v) {
			out = append(out, schedOpt{sc, v})
		}
	}
	L := s.job.Model.Layers
	if pp == 1 {
		add(OneFOneB, 1)
		if s.fix.Pinned("schedule") {
			add(GPipe, 1)
		}
		return out
	}
	add(GPipe, 1)
	add(OneFOneB, 1)
	for _, v := range divisors(L / pp) {
		if v >= 2 {
			add(Interleaved, v)
		}
	}
	if s.fix.Pinned("vpp") && L%(pp*s.fix.plan.VPP) != 0 {
		s.reject(rejLayers, 1)
	}
	return out
}

// precisions lists the precisions to search: those the device supports,
// fp16 only when pinned.
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
		if p != FP16 {
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
