package plan

// What the general path's search computes once for many plans.

// stepFLOPs is the step's model and hardware FLOPs (generalFLOPs), once
// per search for each (flash, recompute): nothing else changes them.
func (g *genSearch) stepFLOPs(j Job, p Plan) [2]float64 {
	i := 3 * b2i(p.Flash)
	switch p.Recompute {
	case RecomputeSelective:
		i++
	case RecomputeFull:
		i += 2
	}
	if !g.flopsOK[i] {
		g.flops[i][0], g.flops[i][1] = j.generalFLOPs(p)
		g.flopsOK[i] = true
	}
	return g.flops[i]
}

// lazyGeneral holds what the general path's plans of one (ep, etp, sp,
// mbs) share, computed when a plan first needs it: the kinds before
// recomputation per order (one flash setting: resetFlash), and per
// (flash, recompute) (reset) the kinds per order for DualPipe and the
// other schedules (which overlap the all-to-all differently), the lower
// bound's kinds, the activation sizes and the ranks' costs of the current
// schedule (the same for every ZeRO stage).
type lazyGeneral struct {
	sets    []kindSet
	setsOK  bool
	ks      [2][]kinds
	have    [2]bool
	lb      [2]kinds // the bound's, the all-to-all not overlapped and overlapped
	lbOK    [2]bool
	mk      memKinds
	mkOK    bool
	ranks   [][]rankCost // per order, for schedule index rankSched−1 (0: none)
	rankFor int
}

func (lg *lazyGeneral) reset() {
	lg.have, lg.lbOK, lg.mkOK, lg.rankFor = [2]bool{}, [2]bool{}, false, 0
}

func (lg *lazyGeneral) resetFlash() {
	lg.reset()
	lg.setsOK = false
}

// memKinds are the plan's activation sizes, once per (flash, recompute).
func (lg *lazyGeneral) memKinds(j Job, p Plan, lay *layout) memKinds {
	if !lg.mkOK {
		lg.mk, lg.mkOK = j.memKinds(p, lay.have), true
	}
	return lg.mk
}

func (lg *lazyGeneral) kinds(j Job, p Plan, orders []orderOpt) []kinds {
	d := b2i(p.Schedule.dual())
	if lg.have[d] {
		return lg.ks[d]
	}
	if cap(lg.ks[d]) < len(orders) {
		lg.ks[d] = make([]kinds, len(orders))
	}
	lg.ks[d] = lg.ks[d][:len(orders)]
	ex := placeExperts(p, j.Cluster.DevicesPerNode)
	if !j.Model.general() { // a dense model's DualPipe plans
		for i, o := range orders {
			lg.ks[d][i] = j.generalKinds(p, o.pl, ex)
		}
	} else {
		if !lg.setsOK {
			lg.sets = lg.sets[:0]
			var from [2]int // the first order with each chunking, +1
			for i, o := range orders {
				ov := b2i(j.tpOverlap(p, o.pl))
				var base *kindSet
				if from[ov] > 0 {
					base = &lg.sets[from[ov]-1]
				} else {
					from[ov] = i + 1
				}
				lg.sets = append(lg.sets, j.kindSetFrom(p, o.pl, ex, base))
			}
			lg.setsOK = true
		}
		for i := range orders {
			lg.ks[d][i] = lg.sets[i].apply(j, p)
		}
	}
	lg.have[d] = true
	return lg.ks[d]
}

// rankCosts are generalRanks of p under order i, once per schedule.
func (lg *lazyGeneral) rankCosts(j Job, p Plan, pl placement, g *generalCosts, i, sched, orders int) []rankCost {
	if lg.rankFor != sched+1 {
		if cap(lg.ranks) < orders {
			lg.ranks = make([][]rankCost, orders)
		}
		lg.ranks = lg.ranks[:orders]
		clear(lg.ranks)
		lg.rankFor = sched + 1
	}
	if lg.ranks[i] == nil {
		lg.ranks[i] = j.generalRanks(p, pl, g)
	}
	return lg.ranks[i]
}
