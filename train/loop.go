package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"trellis/checkpoint"
	"trellis/comm"
	"trellis/data"
	"trellis/device"
	"trellis/metrics"
	"trellis/trace"
)

// runRank builds one rank and runs its steps; rank 0 reports.
func runRank(ctx context.Context, o Options, s settings, loader *data.Loader, res *resumeState, world comm.Group) (*Summary, error) {
	tr := newTracer(o, world)
	r, err := newRank(rankConfig{job: o.Job, set: s, world: world, loader: loader, log: o.Log, trace: tr})
	if err != nil {
		return nil, err
	}
	defer r.free()
	r.stopc = o.Stop
	r.ctx = ctx
	start, pos := 0, data.Position{}
	if res != nil {
		if err := r.st.Restore(res.ckpt, res.meta.OptSteps); err != nil {
			return nil, err
		}
		if err := r.restoreFP8(res.ckpt, res.meta); err != nil {
			return nil, err
		}
		if err := r.restoreBias(res.ckpt); err != nil {
			return nil, err
		}
		start, pos = res.meta.Step, res.meta.Position
		r.restoreScale(res.meta)
	} else if err := initWeights(r.st, o.Job.Train.Seed, s.init); err != nil {
		return nil, err
	} else if err := setExpertBias(r.gpt, o.expertBias); err != nil {
		return nil, err
	}
	end := o.Job.Train.Steps
	if o.Until > 0 {
		if o.Until <= start {
			return nil, fmt.Errorf("--until %d: the run is already at step %d", o.Until, start)
		}
		end = min(end, o.Until)
	}
	rep := newReporter(o, s, r, start, end)
	if res != nil && rep.on {
		for _, n := range res.notes {
			n(o.Log)
		}
	}
	sum := &Summary{FirstStep: start, LastStep: start, ValLoss: math.NaN(), Plan: s.enginePlan.String()}
	for st := start; st < end; st++ {
		stop, err := r.runStep(ctx, st, end, &pos, rep, sum)
		if d := (*Diverged)(nil); errors.As(err, &d) {
			d.LastGood = sum.Checkpoint
			if d.LastGood == "" && res != nil {
				d.LastGood = res.ckpt.Dir()
			}
		}
		if err != nil {
			return nil, err
		}
		if stop && st+1 < end {
			rep.finish(sum)
			return sum, &Interrupted{Step: st + 1, Checkpoint: sum.Checkpoint}
		}
	}
	rep.finish(sum)
	return sum, writeTrace(o, world, tr)
}

// runStep runs optimizer step st and what follows it: statistics,
// evaluation, report, sample and checkpoint. stop reports that some rank's
// context was cancelled; every rank learns it at the same step (it travels
// with the statistics), and the step is checkpointed before the run stops.
func (r *rank) runStep(ctx context.Context, st, end int, pos *data.Position, rep *reporter, sum *Summary) (stop bool, err error) {
	j := r.job
	r.beginStep()
	// A step's time is its period: from where the last step ended, so
	// that what follows a step every time (the statistics' all-gather,
	// the report) is the next step's bookkeeping, less evaluation,
	// sampling and checkpoints (r.clock.excluded). Rank 0's time inside
	// its own step alone would miss that the other ranks, which do not
	// report, start the next step earlier.
	t0 := time.Now()
	if !r.clock.next.IsZero() {
		t0 = r.clock.next
	}
	last, err := r.step(st, *pos)
	if err != nil {
		return false, fmt.Errorf("step %d: %w", st+1, err)
	}
	dt := time.Since(t0) - r.clock.excluded
	r.clock.excluded = 0
	r.endStep(dt)
	r.clock.next = time.Now()
	r.tr.SpanTo(trace.Step, fmt.Sprintf("step %d", st+1), t0, t0.Add(dt))
	// The loss and the norm are global (every rank has the same), so
	// every rank stops here together.
	if !finite(last.loss) || (!finite(last.norm) && !last.skipped) {
		return false, &Diverged{Step: st + 1, Loss: last.loss, GradNorm: last.norm, LR: last.lr}
	}
	*pos = pos.Advance(j.Train.GlobalBatch)
	done := st + 1
	w0 := r.world.Stats()
	stats, stop, err := r.gatherStats(ctx)
	r.clock.gathered(w0, r.world.Stats())
	if err != nil {
		return false, err
	}
	val := math.NaN()
	if ev := j.Train.EvalEvery; (ev > 0 && done%ev == 0) || done == j.Train.Steps {
		tx := time.Now()
		if val, err = r.eval(); err != nil {
			return false, err
		}
		r.clock.excluded += time.Since(tx)
		sum.ValLoss = val
	}
	var sample *string // generated before the step's line, which carries it (--metrics)
	if se := j.Train.SampleEvery; se >= 0 && r.set.enginePlan.PP == 1 && ((se > 0 && done%se == 0) || done == j.Train.Steps) {
		tx := time.Now()
		txt, err := r.generate(j.Train.Prompt, j.Train.SampleLen, 1.0, 40, j.Train.Seed+uint64(done))
		if err != nil {
			return false, err
		}
		r.clock.excluded += time.Since(tx)
		sum.Sample = txt
		full := j.Train.Prompt + txt
		sample = &full
	}
	rep.lineSample = sample
	rep.step(done, last, val, dt, stats)
	defer func(tx time.Time) { r.clock.excluded += time.Since(tx) }(time.Now())
	if sample != nil {
		rep.sample(done, sum.Sample)
	}
	sum.LastStep, sum.Loss, sum.Ranks = done, last.loss, stats
	if j.Checkpoint.Dir != "" && (j.Checkpoint.Due(done) || done == end || stop) {
		dir, err := r.save(done, *pos, last.loss)
		if err != nil {
			return false, err
		}
		sum.Checkpoint = dir
		rep.saved(done, dir)
	}
	return stop, nil
}

// save writes this rank's shards; after a barrier rank 0 commits. A
// failed save leaves no partial directory (rank 0 removes it).
func (r *rank) save(step int, pos data.Position, loss float64) (dir string, err error) {
	store, err := checkpoint.New(r.job.Checkpoint)
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil && r.id == 0 {
			store.Discard(step)
		}
	}()
	shards, err := r.st.Shards()
	if err != nil {
		return "", err
	}
	f8, err := r.fp8Shards()
	if err != nil {
		return "", err
	}
	shards = append(append(shards, f8...), r.biasShards()...)
	if err := store.WriteRank(step, r.id, r.world.Size(), shards); err != nil {
		return "", err
	}
	if err := comm.Barrier(r.world); err != nil {
		return "", err
	}
	if r.id == 0 {
		meta, err := json.Marshal(r.withScale(Meta{Job: r.job, Step: step, Position: pos, OptSteps: r.st.OptimizerSteps(), Loss: loss, RunID: r.set.runID}))
		if err != nil {
			return "", err
		}
		if _, err = store.Commit(checkpoint.Manifest{Step: step, World: r.world.Size(), Plan: r.set.enginePlan.String(), Meta: meta}); err != nil {
			return "", err
		}
	}
	// Nobody runs ahead (and could crash) before the checkpoint is whole;
	// then every rank knows where it is.
	if err := comm.Barrier(r.world); err != nil {
		return "", err
	}
	return store.StepDir(step), nil
}

// gatherStats collects every rank's memory peaks and communication times,
// and whether any rank's context is done (stop). Each int64 travels as
// three 21-bit fp32 pieces, exactly.
func (r *rank) gatherStats(ctx context.Context) ([]RankStats, bool, error) {
	ds := r.dev.Stats()
	cs, cb := r.commStats()
	var cancelled int64
	if ctx.Err() != nil || r.stopRequested() {
		cancelled = 1
	}
	// The exposed wait is the step clock's: the steps' waits on
	// collectives, without a pipeline's transfers (its bubble) or what
	// evaluation waited.
	c := r.clock
	vals := append(ds.Peak[:], ds.PeakTotal, int64(cs.Busy+c.meanBusy+c.gatherBusy), int64(c.comm), cb.TP, cb.DP, cb.PP, cancelled,
		int64(c.compute), int64(c.bubble), int64(c.misc), int64(c.steps), cb.CP, cb.EP, int64(c.peer), int64(c.ring), int64(c.ep))
	const per = 22
	mine := make([]float32, 3*per)
	for i, v := range vals {
		mine[3*i], mine[3*i+1], mine[3*i+2] = float32(v>>42), float32((v>>21)&(1<<21-1)), float32(v&(1<<21-1))
	}
	all := mine
	if n := r.world.Size(); n > 1 {
		all = make([]float32, n*len(mine))
		if err := comm.AllGather(r.world, comm.F32(all), comm.F32(mine)); err != nil {
			return nil, false, err
		}
	}
	out := make([]RankStats, len(all)/len(mine))
	stop := false
	for q := range out {
		get := func(i int) int64 {
			b := all[q*len(mine)+3*i:]
			return int64(b[0])<<42 | int64(b[1])<<21 | int64(b[2])
		}
		out[q].Rank = q
		for t := 0; t < int(device.NumTags); t++ {
			out[q].Peak[t] = get(t)
		}
		out[q].PeakAll = get(6)
		out[q].CommBusy, out[q].CommWait = time.Duration(get(7)), time.Duration(get(8))
		out[q].CommBytes = CommBytes{TP: get(9), DP: get(10), PP: get(11)}
		stop = stop || get(12) != 0
		out[q].Compute, out[q].Bubble, out[q].Misc = time.Duration(get(13)), time.Duration(get(14)), time.Duration(get(15))
		out[q].Steps = time.Duration(get(16))
		out[q].CommBytes.CP = get(17)
		out[q].CommBytes.EP = get(18)
		out[q].PeerWait = time.Duration(get(19))
		out[q].RingWait = time.Duration(get(20))
		out[q].EPWait = time.Duration(get(21))
	}
	return out, stop, nil
}

// CommBytes are the payload bytes a rank passed to collectives over the
// run, per mesh axis (an all-reduce or broadcast counts its buffer, a
// reduce-scatter its input, an all-gather its output).
type CommBytes = metrics.CommBytes

// commStats is the rank's communication: Busy over every group, Wait the
// exposed part (the strategy's waits, the pipeline's transfers, tensor
// parallelism's blocking collectives), and the bytes per mesh axis — the
// data-parallel groups' (with the expert-data-parallel one's), the
// tensor-parallel group's, the pipeline's (its transfers, its tied
// embedding and its share of the norm) and the expert-parallel one's.
func (r *rank) commStats() (comm.Stats, CommBytes) {
	t := r.top
	cs := r.st.CommStats().Add(r.stage.CommStats()).Add(t.tpStats())
	cb := CommBytes{DP: t.grads.Stats().Bytes + t.params.Stats().Bytes, TP: t.tpStats().Bytes}
	for _, g := range []comm.Group{t.pipe, t.tied} {
		if g != nil {
			st := g.Stats()
			cs.Busy += st.Busy
			cb.PP += st.Bytes
		}
	}
	cb.PP += r.stage.CommStats().Bytes
	if t.cp != nil { // the ring's waits are exposed communication too (split.go)
		st := t.cp.Stats()
		cs.Busy += st.Busy
		cs.Wait += st.Wait
		cb.CP = st.Bytes
	}
	if t.ep != nil { // the dispatch's and the combine's all-to-alls block the rank: exposed (under ep_overlap=on the part no compute hid)
		st := t.epStats()
		cs.Busy += st.Busy
		cs.Wait += st.Wait
		cb.EP = st.Bytes
		cb.DP += t.edp.Stats().Bytes
	}
	return cs, cb
}
