package train

import "time"

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
//	         sharing, counts it there too)
//	comm     exposed waits on collectives (data-, tensor-parallel, ZeRO)
//	         once every member has arrived, the ring attention's transfers
//	         (cp), expert parallelism's all-to-alls (ep: reported apart
//	         too, epWait) and the blocking loss mean
//	bubble   a pipeline stage's waits on its point-to-point receives and
//	         sends: the fill and drain, and the transfers themselves
//	misc     the rest of the step: data loading, the optimizer step with
//	         its gradient norm, the strategies' bookkeeping
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
	peer                        time.Duration // cumulative: the part of compute that waited for peers (skew)
	ring                        time.Duration // cumulative: the ring attention's waits (cp), a part of comm
	steps                       time.Duration // cumulative: the steps' wall time on this rank
	ep                          time.Duration // cumulative: expert parallelism's all-to-alls (epWait), a part of comm

	// The step under way.
	start           time.Time
	next            time.Time     // where the next step's period starts (the last step's end)
	excluded        time.Duration // not the next step's: evaluation, samples, checkpoints since then
	wait0, pp0      time.Duration // exposed and pipeline waits at its start
	skew0, mean0    time.Duration // waits for peers at its start: the strategy's and tp's, the loss mean's
	ring0           time.Duration // the ring's waits at its start
	ep0             time.Duration // epWait at its start
	fb, fbWait, get time.Duration // forward/backward wall time, the waits and data loading inside it
	fbStart         time.Time
	fbWait0         time.Duration
	lossMean        time.Duration // the loss all-reduce
}

// waits is the rank's cumulative exposed wait on communication (every
// group it computes with, the pipeline's transfers included) and the part
// of it that is the pipeline's transfers.
func (r *rank) waits() (all, pipe time.Duration) {
	pipe = r.stage.CommStats().Wait
	return r.st.CommStats().Wait + pipe + r.top.tpStats().Wait + r.top.cpStats().Wait + r.top.epStats().Wait, pipe
}

// skews is the part of the strategy's, tensor and expert parallelism's exposed
// waits spent before their groups' last members arrived (comm.Stats.Skew),
// and the world group's (the loss mean's).
func (r *rank) skews() (groups, world time.Duration) {
	return r.st.CommStats().Skew + r.top.tpStats().Skew + r.top.epStats().Skew, r.world.Stats().Skew
}

// epWait is the rank's cumulative exposed wait on its expert-parallel
// group once the group's members had arrived (Wait − Skew: the count
// exchanges' and the all-to-all-v's transfers, which block the rank; the
// all-to-all-v's point-to-point messages report no skew, so a peer's
// lateness there stays in it): the part of comm the step split's ep row
// reports.
func (r *rank) epWait() time.Duration {
	st := r.top.epStats()
	return st.Wait - st.Skew
}

// beginStep starts the step's clock.
func (r *rank) beginStep() {
	c := &r.clock
	c.start = time.Now()
	c.wait0, c.pp0 = r.waits()
	c.skew0, c.mean0 = r.skews()
	c.ring0 = r.top.cpStats().Wait
	c.ep0 = r.epWait()
	c.fb, c.fbWait, c.get, c.lossMean = 0, 0, 0, 0
}

// beginFB and endFB bracket forward and backward work.
func (r *rank) beginFB() {
	r.clock.fbStart = time.Now()
	r.clock.fbWait0, _ = r.waits()
}

func (r *rank) endFB() {
	c := &r.clock
	w, _ := r.waits()
	c.fb += time.Since(c.fbStart)
	c.fbWait += w - c.fbWait0
}

// endStep closes the step of wall time dt and adds its parts.
func (r *rank) endStep(dt time.Duration) {
	c := &r.clock
	w, p := r.waits()
	wait, pipe := w-c.wait0, p-c.pp0
	sk, mk := r.skews()
	// The loss mean's wait for peers is the ranks finishing their steps
	// at different times: compute skew without a pipeline, the drain's
	// bubble with one.
	skew, meanSkew := sk-c.skew0, min(mk-c.mean0, c.lossMean)
	c.compute += c.fb - c.fbWait - c.get + skew
	c.bubble += pipe
	c.comm += wait - pipe - skew + c.lossMean - meanSkew
	c.peer += skew
	if r.set.enginePlan.PP > 1 {
		c.bubble += meanSkew
	} else {
		c.compute += meanSkew
		c.peer += meanSkew
	}
	c.ring += r.top.cpStats().Wait - c.ring0
	c.meanBusy += c.lossMean
	c.ep += r.epWait() - c.ep0
	c.steps += dt
	c.misc += dt - c.fb - (wait - c.fbWait) - c.lossMean + c.get
}
