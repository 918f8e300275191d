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
	e := j.Model.MoE
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

// genSearch is the searcher's state for the general path: which (sp,
// flash, recompute, schedule, zero) combinations of the current shape,
// expert degrees and precision already failed to fit at a smaller
// micro-batch. A plan's memory never falls as its micro-batch grows (its
// activations, transients and buffers grow with the tokens; its in-flight
// count falls only where m < pp, where in-flight × micro-batch is the
// constant global batch over dp), so those plans are counted as over
// the budget without computing their memory: the result and the
// rejection counts are a full enumeration's; only Result.Evaluated
// (memories computed) is smaller.
type genSearch struct {
	combo  int
	failed []bool
	seeded bool // Result.Plans started from seed's plans
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

func (g *genSearch) resetFailed(n int) {
	if cap(g.failed) < n {
		g.failed = make([]bool, n)
	}
	g.failed = g.failed[:n]
	clear(g.failed)
}

// evaluateGeneral is evaluate for the general path: memory, then (if the
// plan fits and a lower bound could still rank it) its time under every
// order.
func (s *searcher) evaluateGeneral(p Plan, orders []orderOpt, sp shapeParams, lz *lazyLayer) {
	j := s.job
	if s.gen.failed[s.gen.combo] {
		s.reject(rejMemory, len(orders))
		return
	}
	mem := j.generalMemoryWith(p, sp.lay, lz.gen.memKinds(j, p, sp.lay))
	s.res.Evaluated += len(orders)
	if sm := s.res.Smallest.Memory.Total; sm == 0 || mem.Total < sm {
		p.Order = orders[0].order
		s.res.Smallest = Estimate{Plan: p, Memory: mem}
	}
	if !mem.Fits() {
		s.gen.failed[s.gen.combo] = true
		s.reject(rejMemory, len(orders))
		return
	}
	s.res.Fitting += len(orders)
	if ps := s.res.Plans; len(ps) == s.top && lz.gen.lowerBound(j, p, sp.lay) > ps[len(ps)-1].Time.Step {
		return
	}
	ks := lz.gen.kinds(j, p, orders)
	for i, o := range orders {
		p.Order = o.order
		s.push(j.generalFinish(p, o.pl, j.generalCostsFor(p, ks[i], sp), mem))
	}
}

// lazyGeneral holds the general path's per-order kinds of one (flash,
// recompute) setting, for DualPipe and the other schedules (which overlap
// the all-to-all differently), and their compute-only lower bound.
type lazyGeneral struct {
	ks   [2][]kinds
	have [2]bool
	lb   [2]kinds
	lbOK [2]bool
	mk   memKinds
	mkOK bool
	// bound caches the lower bound of the current schedule (it does not
	// depend on the ZeRO stage).
	boundLay *layout
	boundS   Schedule
	bound    float64
}

func (lg *lazyGeneral) reset() {
	lg.have, lg.lbOK, lg.mkOK, lg.boundLay = [2]bool{}, [2]bool{}, false, nil
}

// memKinds are the plan's activation sizes, once per (flash, recompute).
func (lg *lazyGeneral) memKinds(j Job, p Plan, lay *layout) memKinds {
	if !lg.mkOK {
		lg.mk, lg.mkOK = j.memKinds(p, lay.have), true
	}
	return lg.mk
}

// lowerBound is generalLowerBound, once per schedule.
func (lg *lazyGeneral) lowerBound(j Job, p Plan, lay *layout) float64 {
	if lg.boundLay != lay || lg.boundS != p.Schedule {
		lg.bound, lg.boundLay, lg.boundS = j.generalLowerBound(p, lay, lg.lowerKinds(j, p)), lay, p.Schedule
	}
	return lg.bound
}

func (lg *lazyGeneral) kinds(j Job, p Plan, orders []orderOpt) []kinds {
	d := b2i(p.Schedule.dual())
	if !lg.have[d] {
		lg.ks[d] = make([]kinds, len(orders))
		ex := placeExperts(p, j.Cluster.DevicesPerNode)
		for i, o := range orders {
			lg.ks[d][i] = j.generalKinds(p, o.pl, ex)
		}
		lg.have[d] = true
	}
	return lg.ks[d]
}

// lowerKinds are the kinds with whole GEMMs and no communication (every
// group on one device, the tensor group spread so nothing is chunked):
// their compute bounds every placement's from below.
func (lg *lazyGeneral) lowerKinds(j Job, p Plan) kinds {
	d := b2i(p.Schedule.dual())
	if !lg.lbOK[d] {
		one := group{n: 1, k: 1}
		pl := placement{tp: group{n: p.TP, k: 1}, cp: one, dp: one, pp: one}
		lg.lb[d] = j.generalKinds(p, pl, placeExperts(p, j.Cluster.DevicesPerNode))
		lg.lbOK[d] = true
	}
	return lg.lb[d]
}

// generalLowerBound is a step time no placement of p beats: m micro-batches
// of the slowest rank's compute and exposed all-to-all (the expert mesh's
// placement does not depend on the order), and the schedule's bubble over
// the mean rank's (every other communication term is positive).
func (j Job) generalLowerBound(p Plan, lay *layout, ks kinds) float64 {
	var slow, mean, meanB, meanW, n float64
	for _, g := range lay.genTime {
		var c passTime
		ep := 0.0
		for s, kd := range kindSlots {
			if g.mb[s] > 0 {
				kc := ks.kind[b2i(kd[0])][b2i(kd[1])]
				c = c.add(kc.compute.scale(g.mb[s]))
				ep += g.mb[s] * kc.ep
			}
		}
		c = c.add(ks.embed.scale(g.mbE)).add(ks.head.add(ks.mtp.compute).scale(g.mbH))
		ep += g.mbH * ks.mtp.ep
		tot := c.total() + ep
		slow = math.Max(slow, tot)
		mean += g.mult * tot
		meanB += g.mult * (c.bwd + c.rc)
		meanW += g.mult * c.wgt
		n += g.mult
	}
	mean, meanB, meanW = mean/n, meanB/n, meanW/n
	m := float64(j.MicroBatches(p))
	pp := float64(p.PP)
	var bubble float64
	switch {
	case p.Schedule.dual():
		per := 1.0
		if p.Schedule == DualPipeV {
			per = 2
		}
		bubble = (float64(lay.C)/2 - 1) * math.Max(0, (mean+meanB-3*meanW)/per)
	case p.Schedule == ZBH1:
		bubble = (pp - 1) * math.Max(0, mean-2*meanW)
	default:
		bubble = (pp - 1) / float64(p.VPP) * mean
	}
	return m*slow + bubble
}

// chunkCompute is a chunk's compute alone.
func (ks kinds) chunkCompute(m Model, c chunkShape) passTime {
	var t passTime
	for _, kd := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
		a, b := kindIndex(kd[0], kd[1])
		if n := kindCount(m, c, kd[0], kd[1]); n > 0 {
			t = t.add(ks.kind[a][b].compute.scale(float64(n)))
		}
	}
	if c.embed {
		t = t.add(ks.embed)
	}
	if c.head {
		t = t.add(ks.head).add(ks.mtp.compute)
	}
	return t
}

// generalCostsFor assembles the general costs of p under order i.
func (j Job) generalCostsFor(p Plan, ks kinds, sp shapeParams) generalCosts {
	return generalCosts{ks: ks, kp: j.kindParams(p), lay: sp.lay, ex: placeExperts(p, j.Cluster.DevicesPerNode)}
}
