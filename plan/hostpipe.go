package plan

import "math"

// hostPipe describes a pipeline's step for the host's core sharing
// (hostTime): pp stages of m micro-batches under a one-forward-one-
// backward, GPipe or interleaved schedule (vpp model chunks a rank), a
// micro-batch's forward f and backward b (its recomputation included)
// on the slowest stage or on each (fs, bs), on a device alone (a chunk
// takes 1/vpp of them).
type hostPipe struct {
	pp, m  int
	vpp    int // model chunks per rank (1 but for interleaved)
	gpipe  bool
	f, b   float64
	fs, bs []float64 // per stage, where known (nil: f and b on every stage)
	lanes  int       // ranks the host runs: replicas × pp (tp and cp ranks each a lane)
}

// pass is stage s's forward and backward of one micro-batch.
func (h hostPipe) pass(s int) (f, b float64) {
	if s < len(h.fs) && s < len(h.bs) {
		return h.fs[s], h.bs[s]
	}
	return h.f, h.b
}

// pipeHost is p's pipeline for hostTime, or nil where the shared-core
// simulation does not apply: no pipeline, a schedule other than 1F1B,
// GPipe and interleaved (the bounds stand for zero-bubble and DualPipe),
// or a cluster that is not a CPU host.
func (j Job) pipeHost(p Plan, m int, slow passTime) *hostPipe {
	if p.PP < 2 || j.Cluster.Cores <= 0 || (p.Schedule != OneFOneB && p.Schedule != GPipe && p.Schedule != Interleaved) {
		return nil
	}
	ranks, _ := j.hostRanks()
	if ranks < p.PP || ranks%p.PP != 0 {
		return nil
	}
	return &hostPipe{pp: p.PP, m: m, vpp: max(1, p.VPP), gpipe: p.Schedule == GPipe, f: slow.fwd, b: slow.bwd + slow.rc, lanes: ranks}
}

// pipeAct is one pass of a lane's list: a forward or a backward of
// micro-batch mb through the lane's model chunk ch.
type pipeAct struct {
	fwd    bool
	mb, ch int
}

// order is stage s's list, the engine's (parallel/pp's schedules):
//
//	1f1b         min(pp − s − 1, m) forwards, then a forward and a
//	             backward in turn, then the remaining backwards
//	gpipe        every forward, then every backward
//	interleaved  Megatron-LM's: the k-th forward runs chunk (k/pp) mod vpp
//	             of micro-batch (k/(pp·vpp))·pp + k mod pp, the k-th
//	             backward that micro-batch's chunk vpp−1−(k/pp) mod vpp;
//	             min(2(pp−s−1) + (vpp−1)·pp, vpp·m) forwards first (all
//	             of them when m = pp)
func (h hostPipe) order(s int) []pipeAct {
	pp, v, m := h.pp, max(h.vpp, 1), h.m
	total := v * m
	at := func(k int, fwd bool) pipeAct {
		if v == 1 {
			return pipeAct{fwd: fwd, mb: k}
		}
		ch := (k / pp) % v
		if !fwd {
			ch = v - 1 - ch
		}
		return pipeAct{fwd: fwd, mb: (k/(pp*v))*pp + k%pp, ch: ch}
	}
	warm := total
	switch {
	case h.gpipe:
	case v == 1:
		warm = min(pp-s-1, m)
	case m != pp:
		warm = min(2*(pp-s-1)+(v-1)*pp, total)
	}
	var out []pipeAct
	for k := 0; k < warm; k++ {
		out = append(out, at(k, true))
	}
	for k := 0; k < total-warm; k++ {
		out = append(out, at(warm+k, true), at(k, false))
	}
	for k := total - warm; k < total; k++ {
		out = append(out, at(k, false))
	}
	return out
}

// makespan is the pipeline's step when its lanes share slots ranks'
// worth of cores, each pass taking its time stretched by stretch (a
// core's rate while the host is busy), the cores taken as Go's scheduler
// gives them to the engine's goroutine ranks: a lane whose next pass is
// ready when its pass ends runs on (a goroutine keeps its thread until
// it blocks); the lanes its pass unblocks wake on its core, the latest
// first (Go's runnext: the one it displaces queues behind); a core whose
// lane blocks takes its own woken lane, then its queue's head, then steals
// another core's oldest queued lane or, failing that, its woken one. A
// woken lane can so wait on a busy core while another core runs a lane
// ready later: 4 stages of 4 micro-batches on 2 cores take 4–7% longer
// than where a free core takes the lane ready longest, which put the grid
// job's pp=4 bubble a quarter under the measured (5.1 ms against 6.6–7.3
// in a step of 42; now 6.5). Passes are not cut into Go's 10 ms
// preemption slices (a pass longer than that would share its core with
// the lanes queued on it). Lane l runs stage l mod pp of
// replica l div pp in its schedule's order (order); chunk c of stage s is
// virtual stage c·pp + s, whose forward of a micro-batch waits for the
// virtual stage before it and whose backward for the one after it.
//
// On cores enough for every lane it is the dedicated pipeline, (m + pp −
// 1)·(f + b) for equal stages; with fewer, the fill and the drain leave
// cores idle only where too few lanes are ready, which the throughput
// bound (every core busy) cannot see.
func (h hostPipe) makespan(slots int, stretch float64) float64 {
	pp, v, m := h.pp, max(h.vpp, 1), h.m
	lists := make([][]pipeAct, h.lanes)
	for l := range lists {
		lists[l] = h.order(l % pp)
	}
	// done[l][fwd][ch][mb]: when that pass ended (−1: not yet).
	done := make([][2][][]float64, h.lanes)
	for l := range done {
		for d := range 2 {
			done[l][d] = make([][]float64, v)
			for c := range v {
				done[l][d][c] = make([]float64, m)
				for i := range m {
					done[l][d][c][i] = -1
				}
			}
		}
	}
	fwdIdx := func(fwd bool) int {
		if fwd {
			return 1
		}
		return 0
	}
	// dep is the pass lane l's action a waits for (ok false: none).
	dep := func(l int, a pipeAct) (lane, ch int, ok bool) {
		base, s := l-l%pp, l%pp
		if a.fwd {
			switch {
			case s > 0:
				return l - 1, a.ch, true
			case a.ch > 0:
				return base + pp - 1, a.ch - 1, true
			}
			return 0, 0, false
		}
		switch {
		case s < pp-1:
			return l + 1, a.ch, true
		case a.ch < v-1:
			return base, a.ch + 1, true
		}
		return 0, 0, false
	}
	pc := make([]int, h.lanes)
	end := make([]float64, h.lanes) // when its running pass ends (−1: none)
	for l := range end {
		end[l] = -1
	}
	// ready says whether lane l's next pass may start (false: it waits
	// on a pass not yet done).
	ready := func(l int) bool {
		a := lists[l][pc[l]]
		dl, dc, ok := dep(l, a)
		return !ok || done[dl][fwdIdx(a.fwd)][dc][a.mb] >= 0
	}
	cores := newGoCores(slots)
	waiting := make([]bool, h.lanes) // blocked on a pass not done yet
	now := 0.0
	start := func(c, l int) {
		f, b := h.pass(l % pp)
		d := b / float64(v) * stretch
		if lists[l][pc[l]].fwd {
			d = f / float64(v) * stretch
		}
		cores[c].run, end[l] = l, now+d
	}
	left := 0
	// At the step's start every lane runs until it blocks: the ready ones
	// take the cores in turn and queue behind them in turn.
	var runnable []int
	for l := range lists {
		left += len(lists[l])
		if ready(l) {
			runnable = append(runnable, l)
		} else {
			waiting[l] = true
		}
	}
	for i, l := range runnable {
		if c := i % slots; cores[c].run < 0 {
			start(c, l)
		} else {
			cores[c].queue = append(cores[c].queue, l)
		}
	}
	for left > 0 {
		// Advance to the next end.
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
		for c := range cores {
			l := cores[c].run
			if l < 0 || end[l] > now {
				continue
			}
			a := lists[l][pc[l]]
			done[l][fwdIdx(a.fwd)][a.ch][a.mb] = now
			end[l] = -1
			pc[l]++
			left--
			// The lanes this pass unblocks wake on this core (the newest in
			// next, the one it displaces queued), and the lane runs on if
			// its next pass is ready, else blocks.
			for k := range lists {
				if !waiting[k] {
					continue
				}
				if dl, _, ok := dep(k, lists[k][pc[k]]); !ok || dl != l {
					continue
				}
				if ready(k) {
					waiting[k] = false
					cores.wake(c, k)
				}
			}
			cores[c].run = -1
			if pc[l] < len(lists[l]) {
				if ready(l) {
					start(c, l)
				} else {
					waiting[l] = true
				}
			}
		}
		for c := range cores {
			if cores[c].run < 0 {
				if l := cores.take(c); l >= 0 {
					start(c, l)
				}
			}
		}
	}
	return now
}
