package plan

import "math"

// The general path's lower bound, in parts the search reuses: the
// attention and MLP blocks of each layer kind (whole GEMMs: the fastest
// any placement computes them; no recomputation) depend on neither dp, pp
// nor the expert degrees, so they are computed once per (tp, cp,
// precision, mbs, sp, flash) for every shape with that tp and cp and
// every (ep, etp), and the routed block once per (ep, etp).
// The bound's kinds then add them and apply the recomputation policy and
// the all-to-all's exposure, which does not depend on the order either.
type lbBlocks struct {
	block [2][2]passTime // attention + mlp, [moe][window]
	core  [2]passTime    // the attention core, [window]
	// tpF, tpB are the least exposed tensor-parallel communication of a
	// layer of each kind, forward and backward: the group inside one node
	// (no placement puts it on fewer nodes), the smaller of its pipelined
	// and unpipelined exposure, so that with whole-GEMM compute the bound
	// holds for every order and for the stack with or without TP overlap.
	tpF, tpB [2][2]float64
	embed    passTime
	head     passTime
	mtpProj  passTime // an MTP module's projection, norms and second head
}

// lbKey is what the blocks depend on: tp, cp, precision, mbs, sp, flash.
type lbKey struct {
	tp, cp, mbs int
	prec        Precision
	sp, flash   bool
}

// lbHit is the last blocks looked up, for one flash setting.
type lbHit struct {
	k lbKey
	b *lbBlocks
}

// blocks returns the blocks for p, computing them on first use; the cache
// holds one (tp, cp) at a time (the search's outer loops).
func (g *genSearch) blocks(j Job, p Plan, have [2][2]bool) *lbBlocks {
	k := lbKey{p.TP, p.CP, p.MBS, p.Precision, p.SP, p.Flash}
	if last := &g.lbLast[b2i(p.Flash)]; last.b != nil && last.k == k {
		return last.b
	}
	if b := g.lb[k]; b != nil {
		g.lbLast[b2i(p.Flash)] = lbHit{k, b}
		return b
	}
	if g.lb == nil || g.lbTP != [2]int{p.TP, p.CP} {
		g.lb, g.lbTP = map[lbKey]*lbBlocks{}, [2]int{p.TP, p.CP}
	}
	b := &lbBlocks{}
	g.lb[k] = b
	g.lbLast[b2i(p.Flash)] = lbHit{k, b}
	r := j.newRecipe(p, placement{tp: group{n: p.TP, k: 1}, cp: group{n: 1, k: 1}, dp: group{n: 1, k: 1}, pp: group{n: 1, k: 1}})
	inNode := placement{tp: group{n: p.TP, k: min(p.TP, max(1, j.Cluster.DevicesPerNode))}, cp: group{n: 1, k: 1}, dp: group{n: 1, k: 1}, pp: group{n: 1, k: 1}}
	ro := j.newRecipe(p, inNode) // pipelined when the stack and sp allow
	m := j.Model
	for w := 0; w < 2; w++ {
		win := 0
		if w == 1 {
			win = m.Window
		}
		if !have[0][w] && !have[1][w] {
			continue
		}
		att := r.attention(win)
		b.core[w] = r.core(win)
		for mo := 0; mo < 2; mo++ {
			if !have[mo][w] {
				continue
			}
			f := m.FFN
			if mo == 1 {
				f = m.MoE.SharedFFN
			}
			ml := r.mlp(f)
			b.block[mo][w] = att.compute.add(ml.compute)
			pairs := append(append([]tpPair(nil), att.pairs...), ml.pairs...)
			noF, noB := r.tpExposedOn(inNode, pairs)
			b.tpF[mo][w], b.tpB[mo][w] = noF, noB
			if ro.overlap {
				oatt := ro.attention(win)
				opairs := append(append([]tpPair(nil), oatt.pairs...), ro.mlp(f).pairs...)
				oF, oB := ro.tpExposed(inNode, opairs)
				if oF+oB < noF+noB {
					b.tpF[mo][w], b.tpB[mo][w] = oF, oB
				}
			}
		}
	}
	b.embed, b.head = j.embedCompute(p, r.k), j.headCompute(p, r.k)
	if m.MTP > 0 {
		h := float64(m.Hidden)
		b.mtpProj = r.linear(r.T, h/r.t, 2*h, false).pass().add(b.head).add(r.elementwise(4*h*r.k.e, 3))
	}
	return b
}

// lowerKinds assembles the bound's kinds for p from the cached blocks and
// p's routed block, the all-to-all overlapped (EP overlap, DualPipe) or
// not.
func (s *searcher) lowerKinds(p Plan, lay *layout, lg *lazyGeneral, overlap bool) *kinds {
	j := s.job
	d := b2i(overlap)
	if lg.lbOK[d] {
		return &lg.lb[d]
	}
	b := s.gen.blocks(j, p, lay.have)
	if j.Model.moe() && !s.gen.routedOK {
		r := j.newRecipe(p, placement{tp: group{n: p.TP, k: 1}, cp: group{n: 1, k: 1}, dp: group{n: 1, k: 1}, pp: group{n: 1, k: 1}})
		s.gen.routed, s.gen.routedOK = r.routed(placeExperts(p, j.Cluster.DevicesPerNode)), true
	}
	routed := s.gen.routed
	share := j.Cluster.overlapFloor()
	ks := &lg.lb[d] // only the fields the bounds read are set
	ks.have, ks.mtp = [2][2]bool{}, kindCost{}
	for mo := 0; mo < 2; mo++ {
		for w := 0; w < 2; w++ {
			if !lay.have[mo][w] {
				continue
			}
			kc := &ks.kind[mo][w]
			kc.compute = b.block[mo][w]
			var aF, aB float64
			if mo == 1 {
				kc.compute = kc.compute.add(routed.compute)
				aF, aB = routed.a2aFwd, routed.a2aBwd
			}
			switch p.Recompute {
			case RecomputeFull:
				kc.compute.rc = kc.compute.fwd
				aB += aF
			case RecomputeSelective:
				if !p.Flash {
					kc.compute.rc = b.core[w].fwd
				}
			}
			kc.ep = aF + aB
			if overlap {
				kc.ep = overlapExposed(aF, kc.compute.bwd+kc.compute.rc, share) + overlapExposed(aB, kc.compute.fwd, share)
			}
			kc.tp = b.tpF[mo][w] + b.tpB[mo][w]
			if p.Recompute == RecomputeFull {
				kc.tp += b.tpF[mo][w]
			}
			ks.have[mo][w] = true
		}
	}
	ks.embed, ks.head = b.embed, b.head
	if m := j.Model; m.MTP > 0 {
		last := m.Layers - 1
		kc := ks.kind[b2i(m.moeLayer(last))][b2i(m.windowLayer(last))]
		n := float64(m.MTP)
		ks.mtp = kindCost{compute: kc.compute.add(b.mtpProj).scale(n), ep: n * kc.ep}
	}
	lg.lbOK[d] = true
	return ks
}

// expertGroupBound is a step time no plan of the shape, precision, mbs and
// sp beats, whatever its expert degrees, flash, recomputation, schedule,
// ZeRO stage or order: m micro-batches of the mean rank's attention and MLP
// blocks (the cheaper attention kernel's, no recomputation) and of its
// routed experts' GEMMs at the best efficiency η_max (their FLOPs, k·n
// token copies through 3·h·f_e, do not depend on ep or etp; η(m_e) ≤
// η_max), over pp ranks.
func (s *searcher) expertGroupBound(p Plan, lay *layout) float64 {
	j := s.job
	m := j.Model
	best := math.Inf(1)
	for _, flash := range s.bools("flash", true) {
		q := p
		q.Flash = flash
		b := s.gen.blocks(j, q, lay.have)
		k := newKernels(j.Cluster.Accel, p.Precision)
		n := j.tokens(p)
		if p.SP {
			n /= float64(p.TP)
		}
		expertFLOPs := 6 * float64(m.MoE.TopK) * n * 3 * float64(m.Hidden) * float64(m.MoE.FFN)
		routed := expertFLOPs / (k.peak * k.a.GEMMEff)
		total := 0.0
		for _, g := range lay.genTime {
			for sl, kd := range kindSlots() {
				if g.mb[sl] > 0 {
					t := b.block[b2i(kd[0])][b2i(kd[1])].total() + b.tpF[b2i(kd[0])][b2i(kd[1])] + b.tpB[b2i(kd[0])][b2i(kd[1])]
					if kd[0] {
						t += routed
					}
					total += g.mult * g.mb[sl] * t
				}
			}
			total += g.mult * (g.mbE*b.embed.total() + g.mbH*b.head.total())
		}
		best = math.Min(best, float64(j.MicroBatches(p))*total/float64(p.PP))
	}
	return best
}

// schedBound is generalLowerBound for p's schedule.
func (s *searcher) schedBound(p Plan, lay *layout, lg *lazyGeneral) float64 {
	return s.job.generalLowerBound(p, lay, s.lowerKinds(p, lay, lg, s.job.Cluster.Software.MoE.EPOverlap || p.Schedule.dual()))
}

// meanBound is a step time no schedule of p beats: m micro-batches of the
// mean rank's compute and exposed all-to-all (every chunk's work once,
// over pp ranks: DualPipe's two copies each carry half), the bound's
// overlapped exposure (the smaller) for every schedule.
func (s *searcher) meanBound(p Plan, lay *layout, lg *lazyGeneral) float64 {
	ks := s.lowerKinds(p, lay, lg, true)
	total := 0.0
	for _, g := range lay.genTime {
		for k, kd := range kindSlots() {
			if g.mb[k] > 0 {
				kc := ks.kind[b2i(kd[0])][b2i(kd[1])]
				total += g.mult * g.mb[k] * (kc.compute.total() + kc.tp + kc.ep)
			}
		}
		total += g.mult * (g.mbE*ks.embed.total() + g.mbH*(ks.head.total()+ks.mtp.compute.total()+ks.mtp.ep))
	}
	return float64(s.job.MicroBatches(p)) * total / float64(p.PP)
}

// generalLowerBound is a step time no placement of p beats: m micro-batches
// of the slowest rank's compute and exposed all-to-all (the expert mesh's
// placement does not depend on the order), and the schedule's bubble over
// the mean rank's (every other communication term is positive).
func (j Job) generalLowerBound(p Plan, lay *layout, ks *kinds) float64 {
	var slow, mean, meanB, meanW, n float64
	for _, g := range lay.genTime {
		var c passTime
		ep := 0.0
		for s, kd := range kindSlots() {
			if g.mb[s] > 0 {
				kc := ks.kind[b2i(kd[0])][b2i(kd[1])]
				c = c.add(kc.compute.scale(g.mb[s]))
				ep += g.mb[s] * (kc.ep + kc.tp)
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
