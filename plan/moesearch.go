package plan

import "math"

// The search's expert axes and the general path's hooks into it.

// expertOpt is one (ep, etp) choice.
type expertOpt struct{ ep, etp int }

// experts lists the (ep, etp) the search tries for a shape: (1, 1) for a
// dense model; for a model with experts every ep dividing the experts with
// etp = 1 or etp = tp (the two expert tensor-parallel sizes Megatron-Core's
// recipes and torchtitan use: experts whole, or split as the attention
// is), each dividing the expert FFN, whose product divides tp·cp·dp
// (parallel folding, expert.go). Any other etp is costed when pinned. A
// shape that allows none is counted as rejected once.
func (s *searcher) experts(tp, cp, dp int) []expertOpt {
	j, f := s.job, s.fix
	if !j.Model.moe() {
		ep, etp := f.plan.Experts()
		if (f.Pinned("ep") && ep > 1) || (f.Pinned("etp") && etp > 1) {
			s.reject(rejExpertDense, 1)
			return nil
		}
		return []expertOpt{{1, 1}}
	}
	e := j.Model.experts()
	n := tp * cp * dp
	var out []expertOpt
	for _, ep := range divisors(e.Experts) {
		if !f.allowsExpert("ep", ep) || n%ep != 0 {
			continue
		}
		etps := []int{1}
		if tp > 1 {
			etps = append(etps, tp)
		}
		if f.Pinned("etp") {
			_, etp := f.plan.Experts()
			etps = []int{etp}
		}
		for _, etp := range etps {
			if !f.allowsExpert("etp", etp) || (n/ep)%etp != 0 || e.FFN%etp != 0 {
				continue
			}
			out = append(out, expertOpt{ep, etp})
		}
	}
	if len(out) == 0 {
		s.reject(rejFold, 1)
	}
	return out
}

// allowsExpert filters ep and etp (stored 0 for 1).
func (f Fix) allowsExpert(key string, v int) bool {
	if !f.keys[key] {
		return true
	}
	ep, etp := f.plan.Experts()
	if key == "ep" {
		return ep == v
	}
	return etp == v
}

// moeShapeRule rejects a shape an MoE model cannot have whatever its
// expert degrees: a tp that does not divide the shared experts' FFN.
func (s *searcher) moeShapeRule(tp int) bool {
	m := s.job.Model
	if m.moe() && m.MoE.SharedFFN%tp != 0 {
		s.reject(rejShared, 1)
		return false
	}
	return true
}

// genSearch is the searcher's state for the general path.
//
// failed marks the (ep, etp, sp, flash, recompute, schedule, zero)
// combinations of the current shape and precision that already failed to
// fit at a smaller micro-batch. A plan's memory never falls as its
// micro-batch grows (its activations, transients and buffers grow with the
// tokens; its in-flight count falls only where m < pp, where in-flight ×
// micro-batch is the constant global batch over dp), so those plans are
// counted as over the budget without computing their memory.
type genSearch struct {
	combo  int
	expert int // the index of the current (ep, etp) among the shape's
	failed []bool
	scheds int // the shape's schedule options (the combination index's)
	// routed is the lower bound's routed block for the current
	// kernelChoicesGeneral call (flash and recomputation do not change it).
	routed   routedCost
	routedOK bool
	seeded   bool                // Result.Plans started from seed's plans
	lb       map[lbKey]*lbBlocks // genbound.go
	flops    [6][2]float64       // stepFLOPs
	flopsOK  [6]bool
	lbTP     [2]int      // the (tp, cp) lb holds
	lbLast   [2]lbHit    // the last lookup, per flash
	lz       lazyGeneral // reused call after call (kernelChoicesGeneral)
}

func (g *genSearch) resetFailed(n int) {
	if cap(g.failed) < n {
		g.failed = make([]bool, n)
	}
	g.failed = g.failed[:n]
	clear(g.failed)
}

// rejBound counts the general path's plans cut by a lower bound before
// their memory was computed: they cannot rank among the best plans found.
const rejBound = "bound: cannot rank among the best (memory not computed)"

// hotKeys are the rejections the general path counts most often, kept in
// an array (searcher.hot) and added to Result.Rejected at the end.
func hotKeys() [4]string { return [4]string{rejMemory, rejBound, rejInterleaved, rejDual} }

func (s *searcher) rejectHot(i, n int) { s.hot[i] += n }

func (s *searcher) flushHot() {
	for i, n := range s.hot {
		s.reject(hotKeys()[i], n)
	}
	s.hot = [4]int{}
}

// splitDual separates the DualPipe schedules (costed by the general path
// for any model) from the others.
func splitDual(scheds []schedOpt) (std, dual []schedOpt) {
	for _, so := range scheds {
		if so.s.dual() {
			dual = append(dual, so)
		} else {
			std = append(std, so)
		}
	}
	return std, dual
}

// kernelChoicesGeneral is kernelChoices for the general path, with the
// lower bound applied before memory at three levels once the kept plans
// are full: the whole call (m micro-batches of the mean rank's compute
// without recomputation, the cheaper attention kernel's), each (flash,
// recompute) (the same with that policy), and each schedule (its slowest
// rank and bubble); a cut counts its plans as rejected by the bound.
func (s *searcher) kernelChoicesGeneral(p Plan, orders []orderOpt, scheds []schedOpt) {
	f := s.fix
	m := s.job.GlobalBatch / (p.DP * p.MBS)
	flashes := s.bools("flash", true)
	rcs := []Recompute{RecomputeNone, RecomputeSelective, RecomputeFull}
	zs := s.zeros(p.DP * p.CP)
	s.gen.routedOK = false
	allowed := func(flash bool, rc Recompute) bool {
		return f.allows("recompute", string(rc)) && !(rc == RecomputeSelective && flash && !f.Pinned("recompute"))
	}
	var none [2]float64 // the bound without recomputation, per flash
	if s.full() {
		lg := &s.gen.lz
		best := math.Inf(1)
		for _, flash := range flashes {
			q := p
			q.Flash, q.Recompute, q.Schedule, q.VPP = flash, RecomputeNone, scheds[0].s, scheds[0].v
			lg.resetFlash()
			none[b2i(flash)] = s.meanBound(q, scheds[0].params.lay, lg)
			best = math.Min(best, none[b2i(flash)])
		}
		if best > s.worst() {
			n := 0
			for _, flash := range flashes {
				for _, rc := range rcs {
					if allowed(flash, rc) {
						n++
					}
				}
			}
			s.cut(m, p.PP, scheds, n*len(zs)*len(orders))
			return
		}
	}
	lg := &s.gen.lz
	for _, flash := range flashes {
		lg.resetFlash()
		for ri, rc := range rcs {
			if !allowed(flash, rc) {
				continue
			}
			p.Recompute, p.Flash = rc, flash
			lg.reset()
			if s.full() {
				q := p
				q.Schedule, q.VPP = scheds[0].s, scheds[0].v
				bound := none[b2i(flash)]
				if rc != RecomputeNone || bound == 0 {
					bound = s.meanBound(q, scheds[0].params.lay, lg)
				}
				if bound > s.worst() {
					s.cut(m, p.PP, scheds, len(zs)*len(orders))
					continue
				}
			}
			for _, so := range scheds {
				p.Schedule, p.VPP = so.s, so.v
				switch {
				case so.s == Interleaved && m%p.PP != 0:
					s.rejectHot(2, len(zs)*len(orders))
					continue
				case so.s.dual() && (m < 2*p.PP || (so.s == DualPipe && m%2 != 0)):
					s.rejectHot(3, len(zs)*len(orders))
					continue
				case s.full() && s.schedBound(p, so.params.lay, lg) > s.worst():
					s.rejectHot(1, len(zs)*len(orders))
					continue
				}
				for _, z := range zs {
					p.ZeRO = z
					s.gen.combo = ((((s.gen.expert*2+b2i(p.SP))*2+b2i(flash))*3+ri)*s.gen.scheds+so.idx)*4 + z
					s.evaluateGeneral(p, orders, so, lg)
				}
			}
		}
	}
}

// seed fills the kept plans with the best of a small search first (the
// same job with mbs = 1 and zero = 1 unless pinned), so that the lower
// bound cuts from the start: a plan is costed only if it could rank among
// plans already found. The full search then meets every plan again (seed's
// are not counted twice, known) and its result is the same as without the
// seed: the bound only skips plans that cannot rank.
func (s *searcher) seed(o Options) {
	f := Fix{keys: map[string]bool{}, plan: s.fix.plan}
	for k, v := range s.fix.keys {
		f.keys[k] = v
	}
	for _, k := range []string{"mbs", "zero"} {
		if !f.keys[k] {
			f.keys[k] = true
			_ = f.plan.Set(k, "1")
		}
	}
	sub := searcher{job: s.job, fix: f, top: s.top, res: Result{Rejected: map[string]int{}}}
	N := s.job.Devices
	for _, tp := range divisors(N) {
		for _, cp := range divisors(N / tp) {
			for _, pp := range divisors(N / tp / cp) {
				sub.shape(tp, cp, pp, N/(tp*cp*pp))
			}
		}
	}
	if sub.err != nil {
		return
	}
	for _, e := range sub.res.Plans {
		e.Variants = nil
		s.res.Plans = append(s.res.Plans, e)
	}
	s.gen.seeded = len(s.res.Plans) > 0
}

// known reports a plan already kept.
func (s *searcher) known(p Plan) bool {
	for _, e := range s.res.Plans {
		if e.Plan == p {
			return true
		}
	}
	return false
}

// cutExperts counts the plans of every expert degree, flash,
// recomputation, schedule and ZeRO stage of p as cut by the bound.
func (s *searcher) cutExperts(p Plan, orders []orderOpt, scheds []schedOpt, experts int) {
	n := 0
	for _, flash := range s.bools("flash", true) {
		for _, rc := range []Recompute{RecomputeNone, RecomputeSelective, RecomputeFull} {
			if s.fix.allows("recompute", string(rc)) && !(rc == RecomputeSelective && flash && !s.fix.Pinned("recompute")) {
				n++
			}
		}
	}
	s.cut(s.job.GlobalBatch/(p.DP*p.MBS), p.PP, scheds, experts*n*len(s.zeros(p.DP*p.CP))*len(orders))
}

// cut counts n plans of each schedule as cut by the bound, or as rejected
// by the schedule's rule on the micro-batches m where it has one (so the
// counts do not depend on where the bound cuts).
func (s *searcher) cut(m, pp int, scheds []schedOpt, n int) {
	for _, so := range scheds {
		switch {
		case so.s == Interleaved && m%pp != 0:
			s.rejectHot(2, n)
		case so.s.dual() && (m < 2*pp || (so.s == DualPipe && m%2 != 0)):
			s.rejectHot(3, n)
		default:
			s.rejectHot(1, n)
		}
	}
}

// full reports a full list of kept plans (the bound can cut).
func (s *searcher) full() bool { return !s.unbounded && len(s.res.Plans) == s.top }

// worst is the step time of the last kept plan.
func (s *searcher) worst() float64 { return s.res.Plans[len(s.res.Plans)-1].Time.Step }

// evaluateGeneral is evaluate for the general path: memory, then (if the
// plan fits) its time under every order its kinds' lower bound lets rank.
func (s *searcher) evaluateGeneral(p Plan, orders []orderOpt, so schedOpt, lg *lazyGeneral) {
	j := s.job
	if s.gen.failed[s.gen.combo] {
		s.rejectHot(0, len(orders))
		return
	}
	if s.engineRefused(p, len(orders)) {
		return
	}
	sp := so.params
	mem := j.generalMemoryWith(p, sp.lay, lg.memKinds(j, p, sp.lay))
	s.res.Evaluated += len(orders)
	if sm := s.res.Smallest.Memory.Total; sm == 0 || mem.Total < sm {
		p.Order = orders[0].order
		s.res.Smallest = Estimate{Plan: p, Memory: mem}
	}
	if !mem.Fits() {
		s.gen.failed[s.gen.combo] = true
		s.rejectHot(0, len(orders))
		return
	}
	s.res.Fitting += len(orders)
	ks := lg.kinds(j, p, orders)
	flops := s.gen.stepFLOPs(j, p)
	for i, o := range orders {
		if s.full() && j.generalLowerBound(p, sp.lay, &ks[i]) > s.worst() {
			continue // fits, but cannot rank under this order: its time need not be computed
		}
		p.Order = o.order
		g := j.generalCostsFor(p, &ks[i], sp)
		g.flops = flops
		g.ranks = lg.rankCosts(j, p, o.pl, &g, i, so.idx, len(orders))
		s.push(j.generalFinish(p, o.pl, &g, mem))
	}
}

// generalCostsFor assembles the general costs of p under order i.
func (j Job) generalCostsFor(p Plan, ks *kinds, sp shapeParams) generalCosts {
	return generalCosts{ks: ks, kp: j.kindParams(p), lay: sp.lay, ex: placeExperts(p, j.Cluster.DevicesPerNode)}
}
