package plan

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

// Search enumerates every valid plan for the job (all factorisations
// dp·tp·pp·cp of the device count, every vpp, schedule, ZeRO stage,
// micro-batch size, sp, recompute, flash, supported precision and every
// rank order that places the groups differently), computes the memory of
// each, drops those over the budget and ranks the rest by step time.
// Options.Fix pins keys; pinning all of them evaluates one plan.
//
// Result.Evaluated counts complete plans whose memory was computed;
// Result.Rejected counts candidates by the rule that cut them, at the point
// where the search cut them: a (tp, cp, pp) shape that breaks a
// divisibility rule counts once, not once per plan it would have led to.
//
// Two pruning rules keep the search exact but small: rank orders that put
// every group on the same nodes as an earlier order are one plan (their
// costs are identical), and fp16 is searched only when pinned (every cost
// equals bf16's). ZeRO stages above 0 are searched only when dp·cp > 1
// (with one replica there is nothing to shard).
func (j Job) Search(o Options) (Result, error) { return j.search(o, false) }

// search is Search; unbounded turns the general path's lower bounds off
// (its tests hold the bounded search to the same plans).
func (j Job) search(o Options, unbounded bool) (Result, error) {
	if err := j.Validate(); err != nil {
		return Result{}, err
	}
	if err := o.Fix.check(); err != nil {
		return Result{}, err
	}
	if o.Top < 0 {
		return Result{}, fmt.Errorf("plan: top=%d: want at least 1 (0 means the default, 10)", o.Top)
	}
	j = j.polledHost()
	s := searcher{job: j, fix: o.Fix, top: o.top(), res: Result{Rejected: map[string]int{}}, unbounded: unbounded}
	if j.Model.general() && !unbounded {
		s.seed(o)
	}
	N := j.Devices
	for _, tp := range divisors(N) {
		for _, cp := range divisors(N / tp) {
			for _, pp := range divisors(N / tp / cp) {
				if stopped(o.Stop) {
					return Result{}, ErrStopped
				}
				s.shape(tp, cp, pp, N/(tp*cp*pp))
			}
		}
	}
	if s.err != nil {
		return Result{}, s.err
	}
	s.flushHot()
	if s.res.Candidates() == 0 {
		s.whyNone()
	}
	return s.res, nil
}

// whyNone records why a search met no candidate at all (the pinned keys
// exclude every plan): the first rule the pinned plan breaks, with its
// numbers, dp completed from the device count when not pinned.
func (s *searcher) whyNone() {
	p, j := s.fix.plan, s.job
	if n, ok := product(j.Devices, p.TP, p.PP, p.CP); !s.fix.Pinned("dp") && ok && j.Devices%n == 0 {
		p.DP = j.Devices / n
	}
	err := j.Check(p)
	if err == nil {
		err = fmt.Errorf("plan: no plan has the pinned values %s", s.fix)
	}
	key := rejFix
	if v := j.rule(p); v.key != "" {
		key = v.key
	}
	s.reject(key, 1)
	s.res.Reason = err.Error()
}

// check rejects pinned values that no plan could have.
func (f Fix) check() error {
	p := f.plan
	for _, k := range []string{"dp", "tp", "pp", "cp", "vpp", "mbs"} {
		if f.keys[k] && *p.intField(k) < 1 {
			return fmt.Errorf("plan: --fix %s=%d: must be at least 1", k, *p.intField(k))
		}
	}
	if f.keys["zero"] && (p.ZeRO < 0 || p.ZeRO > 3) {
		return fmt.Errorf("plan: --fix zero=%d: must be 0, 1, 2 or 3", p.ZeRO)
	}
	return nil
}

type searcher struct {
	job Job
	fix Fix
	top int
	res Result
	err error     // a prediction that is not finite (a cluster's numbers out of range)
	gen genSearch // the general path's state (moesearch.go)
	hot [4]int    // the general path's most frequent rejections (hotKeys), added to Rejected at the end
	// unbounded: the general path costs every plan that fits (search)
	unbounded bool
}

func (s *searcher) reject(key string, n int) {
	if n > 0 {
		s.res.Rejected[key] += n
	}
}

type schedOpt struct {
	s      Schedule
	v      int
	params shapeParams // parameter counts under this (pp, vpp) partition
	idx    int         // its position among the shape's schedules
}

type orderOpt struct {
	order string
	pl    placement
}

// shape searches every plan with the given dp, tp, pp, cp.
func (s *searcher) shape(tp, cp, pp, dp int) {
	j, f := s.job, s.fix
	if !f.allowsInt("tp", tp) || !f.allowsInt("cp", cp) || !f.allowsInt("pp", pp) || !f.allowsInt("dp", dp) {
		return
	}
	if v := j.shapeRule(tp, cp, pp); v.key != "" {
		s.reject(v.key, 1)
		return
	}
	if j.GlobalBatch%dp != 0 {
		s.reject(rejBatch, 1)
		return
	}
	if tp == 1 && f.Pinned("sp") && f.plan.SP {
		s.reject(rejSPTP, 1)
		return
	}
	if !s.moeShapeRule(tp) {
		return
	}
	base := Default()
	base.DP, base.TP, base.PP, base.CP = dp, tp, pp, cp
	orders := s.orders(base)
	if len(orders) == 0 {
		return
	}
	scheds := s.schedules(tp, pp)
	std, dual := splitDual(scheds)
	experts := s.experts(tp, cp, dp)
	for _, prec := range s.precisions() {
		s.gen.resetFailed(len(experts) * 2 * 2 * 3 * len(scheds) * 4)
		s.gen.scheds = len(scheds)
		for _, mbs := range divisors(j.GlobalBatch / dp) {
			if !f.allowsInt("mbs", mbs) {
				continue
			}
			for _, sp := range s.bools("sp", tp > 1) {
				p := base
				p.Precision, p.MBS, p.SP = prec, mbs, sp
				if sp && (j.Seq/cp)%tp != 0 {
					s.reject(rejSP, 1)
					continue
				}
				if tp > 1 && !sp && j.Model.moe() {
					s.reject(rejMoESP, 1)
					continue
				}
				if j.Model.moe() && s.full() && s.expertGroupBound(p, scheds[0].params.lay) > s.worst() {
					s.cutExperts(p, orders, scheds, len(experts))
					continue
				}
				for xi, ex := range experts { // one (1, 1) for a dense model
					p.SetExperts(ex.ep, ex.etp)
					s.gen.expert = xi
					if j.Model.general() {
						s.kernelChoicesGeneral(p, orders, scheds)
						continue
					}
					s.kernelChoices(p, orders, std)
					if len(dual) > 0 { // pinned DualPipe schedules of a dense model
						s.kernelChoicesGeneral(p, orders, dual)
					}
				}
			}
		}
	}
}

// kernelChoices searches flash × recompute × schedule × zero × order for a
// plan whose shape, precision, mbs and sp are set.
func (s *searcher) kernelChoices(p Plan, orders []orderOpt, scheds []schedOpt) {
	f := s.fix
	m := s.job.GlobalBatch / (p.DP * p.MBS)
	for _, flash := range s.bools("flash", true) {
		lz := lazyLayer{lcs: make([]layerCost, len(orders))}
		for _, rc := range []Recompute{RecomputeNone, RecomputeSelective, RecomputeFull} {
			if !f.allows("recompute", string(rc)) {
				continue
			}
			if rc == RecomputeSelective && flash && !f.Pinned("recompute") {
				continue // the same plan as recompute=none: flash keeps no attention core
			}
			p.Recompute, p.Flash = rc, flash
			lz.have = false
			for _, so := range scheds {
				p.Schedule, p.VPP = so.s, so.v
				zs := s.zeros(p.DP * p.CP)
				if so.s == Interleaved && m%p.PP != 0 {
					s.reject(rejInterleaved, len(zs)*len(orders))
					continue
				}
				for _, z := range zs {
					p.ZeRO = z
					s.evaluate(p, orders, so.params, &lz)
				}
			}
		}
	}
}

// lazyLayer computes layer costs only once some plan needs them: the
// compute parts once per flash setting, the per-order costs once per
// recompute policy.
type lazyLayer struct {
	parts           computeParts
	haveParts, have bool
	lcs             []layerCost
}

func (lz *lazyLayer) costs(j Job, p Plan, orders []orderOpt) []layerCost {
	if !lz.have {
		if !lz.haveParts {
			lz.parts, lz.haveParts = j.computeParts(p), true
		}
		for k, o := range orders {
			lz.lcs[k] = j.layerCostFrom(lz.parts, p, o.pl)
		}
		lz.have = true
	}
	return lz.lcs
}

// evaluate computes the memory of p (the same under every order), and if it
// fits, the step time under each order.
func (s *searcher) evaluate(p Plan, orders []orderOpt, sp shapeParams, lz *lazyLayer) {
	j := s.job
	if s.engineRefused(p, len(orders)) {
		return
	}
	mem := j.memory(p, sp)
	s.res.Evaluated += len(orders)
	if sm := s.res.Smallest.Memory.Total; sm == 0 || mem.Total < sm {
		p.Order = orders[0].order
		s.res.Smallest = Estimate{Plan: p, Memory: mem}
	}
	if !mem.Fits() {
		s.reject(rejMemory, len(orders))
		return
	}
	s.res.Fitting += len(orders)
	if ps := s.res.Plans; len(ps) == s.top && s.lowerBound(p, sp, lz) > ps[len(ps)-1].Time.Step {
		return // fits, but cannot rank among the best: its time need not be computed
	}
	lcs := lz.costs(j, p, orders)
	for i, o := range orders {
		p.Order = o.order
		s.push(j.finish(p, o.pl, lcs[i], mem, sp))
	}
}

// lowerBound is a step time no order of p can beat: the slowest stage runs
// m micro-batches of at least its layers' compute, and the bubble is
// (pp−1)/vpp mean stages of at least L/pp layers' compute each, or for
// zb-h1 (pp−1) times L/pp layers' compute less twice their weight-gradient
// GEMMs (every other term of the step is positive).
func (s *searcher) lowerBound(p Plan, sp shapeParams, lz *lazyLayer) float64 {
	j := s.job
	if !lz.haveParts {
		lz.parts, lz.haveParts = j.computeParts(p), true
	}
	layer := lz.parts.withRecompute(p, false).total() // whole GEMMs: never slower than chunked
	pt := sp.pt
	most := max(pt.first, pt.last, pt.mid)
	m := float64(j.MicroBatches(p))
	bubble := float64(p.PP-1) / float64(p.VPP) * float64(j.Model.Layers) / float64(p.PP) * layer
	if p.Schedule == ZBH1 {
		w := lz.parts.layer.wgt
		bubble = float64(p.PP-1) * float64(j.Model.Layers) / float64(p.PP) * math.Max(0, layer-2*w)
	}
	return layer*m*float64(most) + bubble
}

// finish completes an estimate whose memory and layer cost are known.
func (j Job) finish(p Plan, pl placement, lc layerCost, mem Memory, sp shapeParams) Estimate {
	e := Estimate{Plan: p, Memory: mem, Time: j.stepTime(p, pl, lc, sp)}
	e.ModelFLOPs, e.HWFLOPs = j.FLOPs(p)
	n := float64(j.Devices)
	e.TFLOPsPerDevice = e.ModelFLOPs / e.Time.Step / n / tera
	e.HWTFLOPsPerDevice = e.HWFLOPs / e.Time.Step / n / tera
	peak := j.Cluster.Accel.Peak[p.Precision] / tera
	e.MFU, e.HFU = e.TFLOPsPerDevice/peak, e.HWTFLOPsPerDevice/peak
	e.TokensPerS = float64(j.GlobalBatch) * float64(j.Seq) / e.Time.Step
	return e
}

// push keeps the best s.top plans, fastest first (ties: less memory, then
// the canonical text).
func (s *searcher) push(e Estimate) {
	if !finite(e) {
		if s.err == nil {
			s.err = fmt.Errorf("plan: cluster %s: plan %s predicts a step of %g s and %d bytes: the cluster's bandwidths, peaks or latencies are out of range",
				s.job.Cluster.Name, e.Plan.Short(), e.Time.Step, e.Memory.Total)
		}
		return
	}
	ps := s.res.Plans
	if s.gen.seeded && s.known(e.Plan) {
		return
	}
	if s.merge(e) {
		return
	}
	if len(ps) == s.top && !better(e, ps[len(ps)-1]) {
		return
	}
	i := sort.Search(len(ps), func(i int) bool { return better(e, ps[i]) })
	if len(ps) < s.top {
		ps = append(ps, Estimate{})
	}
	copy(ps[i+1:], ps[i:len(ps)-1])
	ps[i] = e
	s.res.Plans = ps
}

// better ranks a before b: the faster step; on a tie (within sameStep)
// the simpler plan (simpler), then less memory, then the canonical text.
func better(a, b Estimate) bool {
	if !sameStep(a.Time.Step, b.Time.Step) {
		return a.Time.Step < b.Time.Step
	}
	if c := simpler(a.Plan, b.Plan); c != 0 {
		return c < 0
	}
	if a.Memory.Total != b.Memory.Total {
		return a.Memory.Total < b.Memory.Total
	}
	return a.Plan.String() < b.Plan.String()
}

// Result is the outcome of a search.
type Result struct {
	// Plans are the best plans that fit, fastest first, each with the
	// variants that predict the same (Estimate.Variants).
	Plans     []Estimate
	Evaluated int            // complete plans whose memory (and, if they fit, time) was computed
	Fitting   int            // of those, how many fit in memory
	Rejected  map[string]int // candidates cut, by rule (see Search)
	// Smallest is the plan that needs the least memory of those evaluated
	// (Memory filled in, Time not), to say how far from fitting a job is.
	Smallest Estimate
	// Reason is set when no candidate was met at all: the rule the pinned
	// keys break, with its numbers.
	Reason string
}

// Candidates is what the search considered: the plans that fit plus
// every rejection, so that Fitting + Σ Rejected = Candidates. A plan cut
// for memory counts once; a shape cut by a rule counts once, not once per
// plan it would have led to.
func (r Result) Candidates() int {
	n := r.Fitting
	for _, v := range r.Rejected {
		n += v
	}
	return n
}

// RejectedReasons lists the keys of Rejected, most frequent first.
func (r Result) RejectedReasons() []string {
	ks := make([]string, 0, len(r.Rejected))
	for k := range r.Rejected {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(a, b int) bool {
		if r.Rejected[ks[a]] != r.Rejected[ks[b]] {
			return r.Rejected[ks[a]] > r.Rejected[ks[b]]
		}
		return ks[a] < ks[b]
	})
	return ks
}

// Options tune a search.
type Options struct {
	Fix Fix
	Top int // plans to keep; 0 means 10, negative is an error
	// Stop, when closed, ends the search early with ErrStopped (a server
	// bounds each search's time so); nil: never.
	Stop <-chan struct{}
}

// ErrStopped is Search's error when Options.Stop was closed.
var ErrStopped = errors.New("plan: search stopped before it finished")

func stopped(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func (o Options) top() int {
	if o.Top <= 0 {
		return 10
	}
	return o.Top
}
