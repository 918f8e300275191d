package train

import (
	"time"

	"trellis/comm"
)

// stepClock splits a rank's step time into the four parts of the
// planner's
//
//	T_step = T_compute + T_comm,exposed + T_bubble + T_misc
//
// with always-on timers (two clock reads and two statistics reads per
// micro-batch; no tracing):
//
//	compute  wall time inside forward and backward (a pipeline stage's
//	         schedule), less the exposed waits inside it and the data
//	         loading a pipeline's schedule calls back for; plus the part
//	         of every collective's exposed wait before the group's last
//	         member arrived (comm.Stats.Skew: waiting for peers still
//	         computing, which on shared cores is waiting for the cores
//	         they hold — the planner's compute term, which charges the
//	         sharing, counts it there too); and where the process's ranks
//	         outnumber its cores, the part of every wait, the pipeline's
//	         included, that the rank's share of the cores ran the other
//	         ranks' work (comm.Stats.Crowded: waiting for a core, which the
//	         planner's compute term counts too)
//	comm     exposed waits on collectives (data-, tensor-parallel, ZeRO)
//	         once every member has arrived and not crowded, the ring attention's transfers
//	         (cp: once the peer has sent, on the in-process backend), expert parallelism's all-to-alls (ep: reported apart
//	         too, epWait) and the blocking loss mean
//	bubble   a pipeline stage's waits on its point-to-point receives and
//	         sends, not crowded: the fill and drain, and the transfers
//	         themselves; and the waits for other stages in the sums over
//	         them that follow the schedule (the tied embedding's
//	         gradient, the gradient norm), not crowded: the drain (the
//	         last stage ends its backwards a micro-batch's backward before
//	         the first)
//	misc     the rest of the step: data loading, the optimizer step with
//	         its gradient norm, the strategies' bookkeeping; the
//	         statistics' all-gather that opens the step's period is split
//	         as a collective is (its wait for peers, for cores, for the
//	         transfer), not left in misc
//
// The four add up to the step's wall time on the rank by construction
// (misc is the remainder). Backends that cannot tell when a group's last
// member arrived (tcp, mpi) report no skew: their waits for peers stay in
// comm. A step's wall time is its period, from the end
// of the last step (runStep): misc includes the statistics' all-gather
// and the report that follow every step. All are cumulative over the run's steps, as
// comm_wait_s is.
type stepClock struct {
	compute, comm, bubble, misc time.Duration // cumulative over steps
	meanBusy                    time.Duration // cumulative: the loss all-reduces (blocking: all exposed)
	peer                        time.Duration // cumulative: the part of compute that waited for peers (skew) or the cores they held (crowd)
	ring                        time.Duration // cumulative: the ring attention's waits (cp), a part of comm
	steps                       time.Duration // cumulative: the steps' wall time on this rank
	ep                          time.Duration // cumulative: expert parallelism's all-to-alls (epWait), a part of comm

	// The step under way.
	start           time.Time
	next            time.Time     // where the next step's period starts (the last step's end)
	excluded        time.Duration // not the next step's: evaluation, samples, checkpoints since then
	at0             waitCounts    // the rank's wait counters at its start
	fb, fbWait, get time.Duration // forward/backward wall time, the waits and data loading inside it
	fbStart         time.Time
	fbWait0         time.Duration
	lossMean        time.Duration // the loss all-reduce
	gather          comm.Stats    // the statistics' all-gather after the last step: the world group's Busy, Wait, Skew and Crowded in it
	gatherBusy      time.Duration // cumulative: the statistics' all-gathers in the steps' periods (their Busy), a part of the comm total
}

// gathered notes the world group's accounting across the statistics'
// all-gather that follows a step (before, after): the next step's period
// holds it.
func (c *stepClock) gathered(before, after comm.Stats) {
	c.gather = comm.Stats{Busy: after.Busy - before.Busy, Wait: after.Wait - before.Wait, Skew: after.Skew - before.Skew, Crowded: after.Crowded - before.Crowded}
}

// waitCounts are a rank's cumulative wait counters, read together at a
// step's start and end (the step's parts are their differences):
//
//	all    exposed waits on every group it computes with (the pipeline's
//	       transfers, the strategy's, tp's, cp's and ep's groups)
//	pipe   the part of all that is the pipeline's transfers
//	skew   the part of the strategy's, tp's, cp's and ep's waits before
//	       their groups' last members arrived (for a receive, before its
//	       sender delivered) that left the cores idle (comm.Stats.Skew)
//	world, worldCrowd  the world group's skew and crowded (the loss mean's)
//	crowd  the part of all's waits (the waits for peers included) that
//	       the rank's share of shared cores ran other ranks' work
//	       (comm.Stats.Crowded; 0 unless in-process ranks outnumber the
//	       cores)
//	pipeCrowd  the part of crowd that is the pipeline's transfers'
//	ring   cp's waits once the peer had sent (the ring attention's
//	       transfers), not crowded
//	ep     ep's waits once its members had arrived, not crowded (Wait − Skew − Crowded: the
//	       count exchanges' and the all-to-all-v's transfers; the
//	       all-to-all-v's point-to-point messages report their senders'
//	       lateness as skew on the in-process backend, not on shm or
//	       tcp, where a peer's lateness stays in it)
//	stages the part of skew that the sums over a pipeline's stages after
//	       its schedule waited (parallel.Strategy.StageStats: the tied
//	       embedding's gradient, the gradient norm's partial; the wait
//	       for other stages that left cores idle, the drain's bubble)
type waitCounts struct{ all, pipe, skew, crowd, pipeCrowd, world, worldCrowd, ring, ep, stages time.Duration }

// waitCounts reads the rank's counters, each group's Stats once.
func (r *rank) waitCounts() waitCounts {
	st, tp, cp, ep := r.st.CommStats(), r.top.tpStats(), r.top.cpStats(), r.top.epStats()
	pipe, ws := r.stage.CommStats(), r.world.Stats()
	return waitCounts{
		all:        st.Wait + pipe.Wait + tp.Wait + cp.Wait + ep.Wait,
		pipe:       pipe.Wait,
		skew:       st.Skew + tp.Skew + cp.Skew + ep.Skew,
		crowd:      st.Crowded + pipe.Crowded + tp.Crowded + cp.Crowded + ep.Crowded,
		pipeCrowd:  pipe.Crowded,
		world:      ws.Skew,
		worldCrowd: ws.Crowded,
		ring:       cp.Wait - cp.Skew - cp.Crowded,
		ep:         ep.Wait - ep.Skew - ep.Crowded,
		stages:     r.st.StageStats().Skew,
	}
}

// beginStep starts the step's clock.
func (r *rank) beginStep() {
	c := &r.clock
	c.start = time.Now()
	c.at0 = r.waitCounts()
	c.fb, c.fbWait, c.get, c.lossMean = 0, 0, 0, 0
}

// beginFB and endFB bracket forward and backward work.
func (r *rank) beginFB() {
	r.clock.fbStart = time.Now()
	r.clock.fbWait0 = r.waitCounts().all
}

func (r *rank) endFB() {
	c := &r.clock
	w := r.waitCounts().all
	c.fb += time.Since(c.fbStart)
	c.fbWait += w - c.fbWait0
}

// endStep closes the step of wall time dt and adds its parts.
func (r *rank) endStep(dt time.Duration) {
	c := &r.clock
	at := r.waitCounts()
	wait, pipe := at.all-c.at0.all, at.pipe-c.at0.pipe
	// The loss mean's wait for peers is the ranks finishing their steps
	// at different times: compute skew without a pipeline, the drain's
	// bubble with one; its wait for the cores others hold is compute.
	skew, meanSkew := at.skew-c.at0.skew, min(at.world-c.at0.world, c.lossMean)
	meanCrowd := min(at.worldCrowd-c.at0.worldCrowd, c.lossMean-meanSkew)
	crowd, pipeCrowd := at.crowd-c.at0.crowd, at.pipeCrowd-c.at0.pipeCrowd
	// The wait for other stages in the sums over them is the drain's: a
	// last stage done with its backwards waits there for the first.
	drain := at.stages - c.at0.stages
	skew -= drain
	c.compute += c.fb - c.fbWait - c.get + skew + crowd + meanCrowd
	c.bubble += pipe - pipeCrowd + drain
	c.comm += wait - pipe - drain - skew - (crowd - pipeCrowd) + c.lossMean - meanSkew - meanCrowd
	c.peer += skew + crowd + meanCrowd
	if r.set.enginePlan.PP > 1 {
		c.bubble += meanSkew
	} else {
		c.compute += meanSkew
		c.peer += meanSkew
	}
	c.ring += at.ring - c.at0.ring
	c.meanBusy += c.lossMean
	c.ep += at.ep - c.at0.ep
	// The statistics' all-gather at the period's start: the wait for
	// peers as the loss mean's, the wait for cores as compute, the rest
	// as comm.
	g := c.gather
	c.gather = comm.Stats{}
	gSkew := min(g.Skew, g.Wait)
	gCrowd := min(g.Crowded, g.Wait-gSkew)
	c.compute += gCrowd
	c.peer += gCrowd
	if r.set.enginePlan.PP > 1 {
		c.bubble += gSkew
	} else {
		c.compute += gSkew
		c.peer += gSkew
	}
	c.comm += g.Wait - gSkew - gCrowd
	c.gatherBusy += g.Busy
	c.steps += dt
	c.misc += dt - c.fb - (wait - c.fbWait) - c.lossMean + c.get - g.Wait
}
