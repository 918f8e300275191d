package plan

import "math"

// hostPipe describes a pipeline's step for the host's core sharing
// (hostTime): pp stages of m micro-batches under a one-forward-one-
// backward or GPipe schedule, a micro-batch's forward f and backward b
// (its recomputation included) on the slowest stage, on a device alone.
type hostPipe struct {
	pp, m   int
	gpipe   bool
	f, b    float64
	lanes   int // ranks the host runs: replicas × pp (tp and cp ranks each a lane)
	threads int // kernel threads per rank
}

// pipeHost is p's pipeline for hostTime, or nil where the shared-core
// simulation does not apply: no pipeline, a schedule other than 1F1B and
// GPipe (their bounds stand), or a cluster that is not a CPU host.
func (j Job) pipeHost(p Plan, m int, slow passTime) *hostPipe {
	if p.PP < 2 || j.Cluster.Cores <= 0 || (p.Schedule != OneFOneB && p.Schedule != GPipe) || p.VPP > 1 {
		return nil
	}
	ranks, threads := j.hostRanks()
	if ranks < p.PP || ranks%p.PP != 0 {
		return nil
	}
	return &hostPipe{pp: p.PP, m: m, gpipe: p.Schedule == GPipe, f: slow.fwd, b: slow.bwd + slow.rc, lanes: ranks, threads: threads}
}

// makespan is the pipeline's step when its lanes share slots ranks'
// worth of cores, each action taking its time stretched by stretch (a
// core's rate while the host is busy): a list schedule in which a core
// that comes free takes the lane that has been ready longest, as the
// engine's goroutine ranks take the cores. Lane l runs stage l mod pp of
// replica l div pp; a forward of micro-batch i waits for the previous
// stage's, a backward for the next stage's, and each lane runs its
// schedule's order:
//
//	1f1b   min(pp − s − 1, m) forwards, then a forward and a backward in
//	       turn, then the remaining backwards
//	gpipe  every forward, then every backward
//
// On cores enough for every lane it is the dedicated pipeline, (m + pp −
// 1)·(f + b) for equal stages; with fewer, the fill and the drain leave
// cores idle only where too few lanes are ready, which the throughput
// bound (every core busy) cannot see.
func (h hostPipe) makespan(slots int, stretch float64) float64 {
	type act struct {
		fwd bool
		mb  int
	}
	pp, m := h.pp, h.m
	lists := make([][]act, h.lanes)
	for l := range lists {
		s := l % pp
		warm := m
		if !h.gpipe {
			warm = min(pp-s-1, m)
		}
		for i := 0; i < warm; i++ {
			lists[l] = append(lists[l], act{true, i})
		}
		for i := 0; i < m-warm; i++ {
			lists[l] = append(lists[l], act{true, warm + i}, act{false, i})
		}
		for i := m - warm; i < m; i++ {
			lists[l] = append(lists[l], act{false, i})
		}
	}
	doneF := make([][]float64, h.lanes) // when each micro-batch's forward ended (−1: not yet)
	doneB := make([][]float64, h.lanes)
	for l := range doneF {
		doneF[l], doneB[l] = make([]float64, m), make([]float64, m)
		for i := range m {
			doneF[l][i], doneB[l][i] = -1, -1
		}
	}
	pc := make([]int, h.lanes)
	free := make([]float64, h.lanes) // when the lane's last action ended
	end := make([]float64, h.lanes)  // when its running action ends (−1: none)
	for l := range end {
		end[l] = -1
	}
	// ready is when lane l's next action may start (ok false: it waits on
	// an action not yet done).
	ready := func(l int) (float64, bool) {
		a := lists[l][pc[l]]
		s := l % pp
		t := free[l]
		switch {
		case a.fwd && s > 0:
			if doneF[l-1][a.mb] < 0 {
				return 0, false
			}
			t = max(t, doneF[l-1][a.mb])
		case !a.fwd && s < pp-1:
			if doneB[l+1][a.mb] < 0 {
				return 0, false
			}
			t = max(t, doneB[l+1][a.mb])
		}
		return t, true
	}
	now, busy, left := 0.0, 0, 0
	for l := range lists {
		left += len(lists[l])
	}
	for left > 0 {
		// Start the lanes ready longest on the free cores.
		for busy < slots {
			best, bt := -1, math.Inf(1)
			for l := range lists {
				if end[l] >= 0 || pc[l] == len(lists[l]) {
					continue
				}
				if t, ok := ready(l); ok && t <= now && t < bt {
					best, bt = l, t
				}
			}
			if best < 0 {
				break
			}
			a := lists[best][pc[best]]
			d := h.b
			if a.fwd {
				d = h.f
			}
			end[best] = now + d*stretch
			busy++
		}
		// Advance to the next end (or the next readiness, none running).
		next := math.Inf(1)
		for l := range lists {
			if end[l] >= 0 {
				next = min(next, end[l])
			}
		}
		if math.IsInf(next, 1) {
			return math.Inf(1) // nothing runs and nothing is ready: the lists deadlock (not for these schedules)
		}
		now = next
		for l := range lists {
			if end[l] < 0 || end[l] > now {
				continue
			}
			a := lists[l][pc[l]]
			if a.fwd {
				doneF[l][a.mb] = now
			} else {
				doneB[l][a.mb] = now
			}
			free[l], end[l] = now, -1
			pc[l]++
			busy--
			left--
		}
	}
	return now
}
