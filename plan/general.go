package plan

import "math"

// The general path composes a step from the layer kinds (kinds.go) over
// the pipeline layout (layout.go). It costs every plan of a model with
// experts or MLA (Model.general) and every DualPipe plan; every other plan
// keeps the dense path (estimate.go), unchanged.

// useGeneral reports whether p is costed by the general path.
func (j Job) useGeneral(p Plan) bool { return j.Model.general() || p.Schedule.dual() }

// chunkCost is one chunk for one micro-batch on one device.
type chunkCost struct {
	compute passTime
	tp, cp  float64
	ep      float64 // exposed all-to-all
	a2a     float64 // all-to-all before overlap
	act     float64 // activations one micro-batch leaves (the head's in actHead)
	dense   float64 // parameters: dense part
	expert  float64 // parameters: routed experts
}

func (j Job) chunkCost(p Plan, ks *kinds, kp [2][2]float64, c chunkShape, C int) chunkCost {
	var cc chunkCost
	add := func(kc kindCost, n float64) {
		if n == 0 {
			return
		}
		cc.compute = cc.compute.add(kc.compute.scale(n))
		cc.tp += n * kc.tp
		cc.cp += n * kc.cp
		cc.ep += n * kc.ep
		cc.a2a += n * kc.a2a
		cc.act += n * kc.act
	}
	m := j.Model
	for _, kd := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
		a, b := kindIndex(kd[0], kd[1])
		add(ks.kind[a][b], float64(kindCount(m, c, kd[0], kd[1])))
	}
	if c.embed {
		cc.compute = cc.compute.add(ks.embed)
		cc.tp += ks.embedTP
		cc.act += ks.actEmbed
	}
	if c.head {
		cc.compute = cc.compute.add(ks.head)
		cc.tp += ks.headTP
		add(ks.mtp, 1)
	}
	cc.dense, cc.expert = j.chunkParams(p, kp, c, C)
	if b := j.Cluster.Software.gradAccumBytes(p.Precision); b > 0 {
		cc.compute.bwd += ks.k.stream((cc.dense+cc.expert)*b, 1)
	}
	return cc
}

// rankCost is one rank's work per micro-batch (the chunks each micro-batch
// passes there, weighted by their share) and its parameters.
type rankCost struct {
	rank          int
	compute       passTime
	tp, cp, ep    float64
	pp, zero      float64
	a2a           float64
	dense, expert float64
	chunks        []chunkCost
}

func (rc rankCost) total() float64 {
	return rc.compute.total() + rc.tp + rc.cp + rc.ep + rc.pp + rc.zero
}

// generalCosts holds what one plan's costing computes once: its kinds,
// their parameters and the layout.
type generalCosts struct {
	ks    *kinds
	kp    [2][2]float64
	lay   *layout
	ex    expertPlacement
	flops [2]float64 // model and hardware FLOPs of the step (0: not yet counted)
	// ranks are the time ranks' costs without the per-micro-batch ZeRO
	// traffic (generalRanks; nil: not yet costed), which the search reuses
	// across ZeRO stages.
	ranks []rankCost
}

func (j Job) newGeneralCosts(p Plan, pl placement, lay *layout) generalCosts {
	ex := placeExperts(p, j.Cluster.DevicesPerNode)
	ks := j.generalKinds(p, pl, ex)
	return generalCosts{ks: &ks, kp: j.kindParams(p), lay: lay, ex: ex}
}

// generalRanks costs the layout's time ranks (rankCost) without their
// ZeRO traffic.
func (j Job) generalRanks(p Plan, pl placement, g *generalCosts) []rankCost {
	ranks := make([]rankCost, len(g.lay.genTime))
	for i, gr := range g.lay.genTime {
		ranks[i] = j.rankCost(p, pl, g, g.lay.ranks[gr.rank])
	}
	return ranks
}

// rankCost is a rank's costs but its per-micro-batch ZeRO traffic
// (generalZeRO, added by generalStepTime).
func (j Job) rankCost(p Plan, pl placement, g *generalCosts, rs rankShape) rankCost {
	rc := rankCost{rank: rs.rank, chunks: make([]chunkCost, 0, len(rs.chunks))}
	for _, c := range rs.chunks {
		cc := j.chunkCost(p, g.ks, g.kp, c, g.lay.C)
		rc.chunks = append(rc.chunks, cc)
		rc.compute = rc.compute.add(cc.compute.scale(c.share))
		rc.tp += c.share * cc.tp
		rc.cp += c.share * cc.cp
		rc.ep += c.share * cc.ep
		rc.a2a += c.share * cc.a2a
		rc.dense += cc.dense
		rc.expert += cc.expert
	}
	if p.PP > 1 {
		rc.pp = j.generalPipeComm(p, pl, rs, rc)
	}
	return rc
}

// generalPipeComm is the exposed point-to-point traffic of one
// micro-batch on a rank: synchronous for 1F1B, GPipe and zb-h1 (2 transfers
// per chunk, 4 when each blocks on its own); interleaved and DualPipe
// schedules post them asynchronously, so only a transfer's excess over
// the chunk's forward (or backward) is exposed.
func (j Job) generalPipeComm(p Plan, pl placement, rs rankShape, rc rankCost) float64 {
	t := p2p(j.boundaryBytes(p), j.Cluster.link(pl.pp))
	if p.Schedule != Interleaved && !p.Schedule.dual() {
		if j.Cluster.Software.PPBlockingP2P {
			return 4 * float64(len(rs.chunks)) * t
		}
		return 2 * float64(len(rs.chunks)) * t
	}
	e := 0.0
	for i, c := range rs.chunks {
		cc := rc.chunks[i].compute
		e += c.share * (math.Max(0, t-cc.fwd) + math.Max(0, t-cc.bwd-cc.rc))
	}
	return e
}

// generalZeRO is the exposed per-micro-batch ZeRO traffic of a rank: ZeRO-2
// reduce-scatters every micro-batch's gradients (dense over dp·cp, experts
// over EDP) behind its backward but the last bucket; ZeRO-3 gathers each
// layer's parameters before its forward and backward and reduce-scatters
// its gradients, prefetched behind the previous layer's compute, with the
// software profile's module count, regather and backward-post as the
// dense path has them.
func (j Job) generalZeRO(p Plan, pl placement, g *generalCosts, rs rankShape, rc rankCost) float64 {
	c := j.Cluster
	w, gb := weightBytes(p.Precision), gradBytes(p.Precision)
	dp, edp := j.dpGroups(p, pl, g.ex)
	switch p.ZeRO {
	case 2:
		P := rc.dense + rc.expert
		all := c.reduceScatter(rc.dense*gb, dp) + c.reduceScatter(rc.expert*gb, edp)
		first := c.reduceScatter(math.Min(bucketParams, P)*gb, dp)
		return math.Max(first, all-rc.compute.bwd-rc.compute.rc)
	case 3:
		sw := c.Software
		mods := sw.modules()
		exposed := 0.0
		for _, ch := range rs.chunks {
			share := ch.share
			for _, kd := range [][2]int{{0, 0}, {0, 1}, {1, 0}, {1, 1}} {
				if !g.ks.have[kd[0]][kd[1]] {
					continue
				}
				n := kindCount(j.Model, ch, kd[0] == 1, kd[1] == 1)
				if n == 0 {
					continue
				}
				kc := g.ks.kind[kd[0]][kd[1]]
				pd, pe := g.kp[kd[0]][0], g.kp[kd[0]][1]
				ag := mods*c.allGather(pd*w/mods, dp) + c.allGather(pe*w, edp)
				rsc := mods*c.reduceScatter(pd*gb/mods, dp) + c.reduceScatter(pe*gb, edp)
				bg := 1.0
				if sw.ZeRO3Regather && p.Recompute == RecomputeFull {
					bg = 2
				}
				bwd := math.Max(0, bg*ag+rsc-kc.compute.bwd-kc.compute.rc)
				if sw.ZeRO3BackwardPost {
					bwd = ag + math.Max(0, (bg-1)*ag+rsc-kc.compute.bwd-kc.compute.rc)
				}
				exposed += share * float64(n) * (math.Max(0, ag-kc.compute.fwd-kc.tp/3) + bwd)
			}
		}
		vocab := float64(j.Model.Vocab) * float64(j.Model.Hidden) / float64(p.TP)
		return exposed + c.allGather(math.Max(g.kp[0][0]+g.kp[1][0], vocab)*w, dp)
	}
	return 0
}

// kindCount is the layers of one kind in a chunk.
func kindCount(m Model, c chunkShape, moe, window bool) int {
	moeFull := c.moe - min(c.moe, c.window)
	if !m.moe() {
		moeFull = 0
	}
	moeWin := c.moe - moeFull
	switch {
	case moe && window:
		return moeWin
	case moe:
		return moeFull
	case window:
		return c.window - moeWin
	}
	return c.layers - c.window - moeFull
}

// dpGroups are the gradient groups of the dense part (dp·cp) and of the
// experts (EDP), each doubled under DualPipe (the mirrored copy).
func (j Job) dpGroups(p Plan, pl placement, ex expertPlacement) (dense, expert group) {
	dense, expert = pl.dp, ex.edp
	if p.Schedule == DualPipe {
		dense = group{n: 2 * dense.n, k: dense.k}
		expert = group{n: 2 * expert.n, k: expert.k}
	}
	return dense, expert
}
