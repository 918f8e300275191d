package plan

import "math"

// generalStepTime composes the step of the general path. Every rank of the
// layout runs m micro-batches through its chunks (each passing a chunk on
// it with the chunk's share: ½ per DualPipe direction); the slowest rank
// sets the pace, filling and draining the pipeline adds the schedule's
// bubble over the mean rank:
//
//	1f1b, gpipe   (pp−1) · mean          interleaved  (pp−1)/vpp · mean
//	zb-h1         (pp−1) · max(0, mean − 2W)
//	dualpipe(v)   (C/2 − 1) · max(0, F&B + B − 3W)   (deepseek-ai/DualPipe)
//
// with C the chunks of the split (pp for DualPipe, 2·pp for DualPipeV), and
// F&B, B and W a mean chunk's forward-and-backward (its communication
// overlapped: what stays exposed is in it), backward and weight-gradient
// GEMMs for one micro-batch.
func (j Job) generalStepTime(p Plan, pl placement, g *generalCosts) (Time, []rankCost) {
	lay := g.lay
	if g.ranks == nil {
		g.ranks = j.generalRanks(p, pl, g)
	}
	ranks := make([]rankCost, len(g.ranks))
	copy(ranks, g.ranks)
	for i := range ranks {
		ranks[i].zero = j.generalZeRO(p, pl, g, lay.ranks[lay.genTime[i].rank], ranks[i])
	}
	slow := ranks[0]
	var mean, meanB, meanW, meanC, n float64
	for i, rc := range ranks {
		if rc.total() > slow.total() {
			slow = rc
		}
		w := lay.genTime[i].mult
		mean += w * rc.total()
		meanC += w * rc.compute.total()
		meanB += w * (rc.compute.bwd + rc.compute.rc)
		meanW += w * rc.compute.wgt
		n += w
	}
	mean, meanB, meanW, meanC = mean/n, meanB/n, meanW/n, meanC/n
	m := float64(j.MicroBatches(p))
	var t Time
	t.MicroBatches = j.MicroBatches(p)
	t.StageTime, t.SlowStage = slow.total(), slow.rank
	t.Compute = m * slow.compute.total()
	t.TP, t.CP, t.PP, t.EP = m*slow.tp, m*slow.cp, m*slow.pp, m*slow.ep
	t.DP = m*slow.zero + j.generalStepComm(p, pl, g, ranks)
	t.CommExposed = t.TP + t.CP + t.PP + t.DP + t.EP
	pp := float64(p.PP)
	switch {
	case p.Schedule.dual():
		per := 1.0 // chunks a micro-batch passes on a rank
		if p.Schedule == DualPipeV {
			per = 2
		}
		fb, b, w := mean/per, meanB/per, meanW/per
		t.Bubble = (float64(lay.C)/2 - 1) * math.Max(0, fb+b-3*w)
	case p.Schedule == ZBH1:
		t.Bubble = (pp - 1) * math.Max(0, mean-2*meanW)
	default:
		t.Bubble = (pp - 1) / float64(p.VPP) * mean
	}
	t.Optimizer = j.generalOptimizer(p, g.ks.k, ranks)
	t.Misc = t.Optimizer
	t.Step = t.Compute + t.CommExposed + t.Bubble + t.Misc
	return j.hostTime(t, m*meanC, j.pipeHost(p, t.MicroBatches, slow.compute)), ranks
}

// generalStepComm is the data-parallel traffic done once per step and
// exposed, for the rank where it is largest: the dense gradients reduced
// over dp·cp and the experts' over EDP (all-reduce under ZeRO-0,
// reduce-scatter under ZeRO-1), bucket by bucket behind the last
// micro-batch's backward but the last bucket; ZeRO-1/2 then gather the
// updated parameters behind the next step's first forward but the first
// bucket (as stepComm); a tied embedding's gradient between the two end
// ranks.
func (j Job) generalStepComm(p Plan, pl placement, g *generalCosts, ranks []rankCost) float64 {
	if j.hostBusy() { // see hostBusy and busyHost
		return j.busyHost(func(k Job, w float64) float64 {
			hidden := append([]rankCost(nil), ranks...)
			for i := range hidden {
				hidden[i].compute = ranks[i].compute.scale(w)
			}
			return k.generalStepExposed(p, pl, g, hidden)
		})
	}
	return j.generalStepExposed(p, pl, g, ranks)
}

// generalStepExposed is generalStepComm behind the ranks' windows given.
func (j Job) generalStepExposed(p Plan, pl placement, g *generalCosts, ranks []rankCost) float64 {
	c := j.Cluster
	w, gb := weightBytes(p.Precision), gradBytes(p.Precision)
	dp, edp := j.dpGroups(p, pl, g.ex)
	reduce := func(S float64, grp group) float64 {
		if p.ZeRO == 0 {
			return c.allReduce(S, grp)
		}
		return c.reduceScatter(S, grp)
	}
	exposed := 0.0
	for _, rc := range ranks {
		nd, ne := buckets(rc.dense), buckets(rc.expert)
		first := math.Min(bucketParams, rc.dense)
		window := rc.compute.bwd + rc.compute.rc
		slack := 0.0
		if !p.Schedule.dual() {
			slack = float64(rc.rank) * window
		}
		var e float64
		if p.ZeRO <= 1 {
			all := nd * reduce(rc.dense/nd*gb, dp)
			if rc.expert > 0 {
				all += ne * reduce(rc.expert/ne*gb, edp)
			}
			e = math.Max(reduce(first*gb, dp), all-window-slack)
		}
		if p.ZeRO == 1 || p.ZeRO == 2 {
			all := nd * c.allGather(rc.dense/nd*w, dp)
			if rc.expert > 0 {
				all += ne * c.allGather(rc.expert/ne*w, edp)
			}
			e += math.Max(c.allGather(first*w, dp), all-rc.compute.fwd)
		}
		exposed = math.Max(exposed, e)
	}
	if p.PP > 1 && j.Model.Tied {
		vocab := float64(j.Model.Vocab) * float64(j.Model.Hidden) / float64(p.TP)
		exposed += c.allReduce(vocab*gb, group{n: 2, k: min(2, pl.pp.k)})
	}
	return exposed
}

// generalOptimizer is the memory-bound optimizer step (optimizerTime's
// bytes per parameter) over the parameters the busiest rank updates: its
// ZeRO shards of the dense and expert parts; fp8 then casts every weight on
// the device.
func (j Job) generalOptimizer(p Plan, k kernels, ranks []rankCost) float64 {
	nd, ne := p.shards()
	most, all := 0.0, 0.0
	for _, rc := range ranks {
		P := rc.dense + rc.expert
		if p.ZeRO >= 1 {
			P = rc.dense/nd + rc.expert/ne
		}
		most, all = math.Max(most, P), math.Max(all, rc.dense+rc.expert)
	}
	bytes := 3*gradBytes(p.Precision) + 24 + weightBytes(p.Precision)
	if p.Precision == FP32 {
		bytes = 36
	}
	t := k.stream(most*bytes, 4)
	if p.Precision == FP8 {
		t += k.stream(4*all, 1)
	}
	return t
}
