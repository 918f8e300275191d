package train

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"runtime"
	"time"

	"trellis/checkpoint"
	"trellis/comm"
	"trellis/data"
	"trellis/device"
	"trellis/ops"
)

// commStatser is implemented by strategies that communicate.
type commStatser interface{ CommStats() comm.Stats }

// runRank builds one rank and runs its steps; rank 0 reports.
func runRank(ctx context.Context, o Options, s settings, loader *data.Loader, res *resumeState, world comm.Group) (*Summary, error) {
	r, err := newRank(rankConfig{job: o.Job, set: s, world: world, loader: loader, log: o.Log})
	if err != nil {
		return nil, err
	}
	defer r.free()
	r.ctx = ctx
	start, pos := 0, data.Position{}
	if res != nil {
		if err := r.st.Restore(res.ckpt, res.meta.OptSteps); err != nil {
			return nil, err
		}
		start, pos = res.meta.Step, res.meta.Position
	} else if err := r.st.Init(o.Job.Train.Seed); err != nil {
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
	sum := &Summary{FirstStep: start, LastStep: start, ValLoss: math.NaN(), Plan: s.enginePlan.String()}
	var last stepResult
	for st := start; st < end; st++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		t0 := time.Now()
		last, err = r.step(st, pos)
		if err != nil {
			return nil, fmt.Errorf("step %d: %w", st+1, err)
		}
		dt := time.Since(t0)
		pos = pos.Advance(o.Job.Train.GlobalBatch)
		done := st + 1
		stats, err := r.gatherStats()
		if err != nil {
			return nil, err
		}
		val := math.NaN()
		if ev := o.Job.Train.EvalEvery; (ev > 0 && done%ev == 0) || done == o.Job.Train.Steps {
			if val, err = r.eval(); err != nil {
				return nil, err
			}
			sum.ValLoss = val
		}
		rep.step(done, last, val, dt, stats)
		if se := o.Job.Train.SampleEvery; se >= 0 && ((se > 0 && done%se == 0) || done == o.Job.Train.Steps) {
			txt, err := r.generate(o.Job.Train.Prompt, o.Job.Train.SampleLen, 1.0, 40, o.Job.Train.Seed+uint64(done))
			if err != nil {
				return nil, err
			}
			sum.Sample = txt
			rep.sample(done, txt)
		}
		sum.LastStep, sum.Loss, sum.Ranks = done, last.loss, stats
		if o.Job.Checkpoint.Dir != "" && (o.Job.Checkpoint.Due(done) || done == end) {
			dir, err := r.save(done, pos, last.loss)
			if err != nil {
				return nil, err
			}
			sum.Checkpoint = dir
			rep.saved(done, dir)
		}
	}
	rep.finish(sum)
	return sum, nil
}

// save writes this rank's shards; after a barrier rank 0 commits.
func (r *rank) save(step int, pos data.Position, loss float64) (string, error) {
	store, err := checkpoint.New(r.job.Checkpoint)
	if err != nil {
		return "", err
	}
	shards, err := r.st.Shards()
	if err != nil {
		return "", err
	}
	if err := store.WriteRank(step, r.id, r.world.Size(), shards); err != nil {
		return "", err
	}
	if err := comm.Barrier(r.world); err != nil {
		return "", err
	}
	var dir string
	if r.id == 0 {
		meta, err := json.Marshal(Meta{Job: r.job, Step: step, Position: pos, OptSteps: r.st.OptimizerSteps(), Loss: loss})
		if err != nil {
			return "", err
		}
		if dir, err = store.Commit(checkpoint.Manifest{Step: step, World: r.world.Size(), Plan: r.set.enginePlan.String(), Meta: meta}); err != nil {
			return "", err
		}
	}
	// Nobody runs ahead (and could crash) before the checkpoint is whole.
	return dir, comm.Barrier(r.world)
}

// gatherStats collects every rank's memory peaks and communication times.
// Each int64 travels as three 21-bit fp32 pieces, exactly.
func (r *rank) gatherStats() ([]RankStats, error) {
	ds := r.dev.Stats()
	var cs comm.Stats
	if c, ok := r.st.(commStatser); ok {
		cs = c.CommStats()
	}
	vals := append(ds.Peak[:], ds.PeakTotal, int64(cs.Busy), int64(cs.Wait))
	const per = 9
	mine := make([]float32, 3*per)
	for i, v := range vals {
		mine[3*i], mine[3*i+1], mine[3*i+2] = float32(v>>42), float32((v>>21)&(1<<21-1)), float32(v&(1<<21-1))
	}
	all := mine
	if n := r.world.Size(); n > 1 {
		all = make([]float32, n*len(mine))
		if err := comm.AllGather(r.world, comm.F32(all), comm.F32(mine)); err != nil {
			return nil, err
		}
	}
	out := make([]RankStats, len(all)/len(mine))
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
	}
	return out, nil
}

// peakFLOPS is the machine's fp32 peak for ranks×threads goroutines, capped
// at the CPUs there are: one thread's measured FMA throughput times the
// cores in use. MFU's denominator.
func peakFLOPS(ranks, threads int) float64 {
	cores := min(ranks*threads, runtime.NumCPU())
	return ops.PeakGFLOPS("auto", 1, 100*time.Millisecond) * 1e9 * float64(cores)
}
