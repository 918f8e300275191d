package train

import (
	"fmt"
	"time"

	"trellis/comm"
	"trellis/data"
	"trellis/mesh"
	"trellis/model"
	"trellis/optim"
	"trellis/parallel/pp"
	"trellis/plan"
	"trellis/trace"
)

// pipe is a pipeline rank's part of the program: its layout, schedule,
// state, executor and groups (package parallel/pp).
type pipe struct {
	layout pp.Layout
	sched  *pp.Schedule
	state  *pp.State
	stage  *pp.Stage
	link   *pp.P2PLink
	groups []comm.Group // pipeline and tied-embedding groups, closed by free
}

// checkPipeline rejects a pipeline the engine cannot run, before any rank
// starts: the schedule's rules (pp.Config.Validate), a stage without a
// layer, and what does not compose with it yet.
func checkPipeline(j Job, p plan.Plan, accum int) error {
	if p.PP == 1 {
		return nil
	}
	if p.ZeRO > 1 {
		return fmt.Errorf("parallel.plan: zero=%d with pp=%d: pipelines take ZeRO stage 0 or 1 (ZeRO-2 would reduce-scatter each micro-batch's gradients, ZeRO-3 gather each stage's weights for every micro-batch pass)", p.ZeRO, p.PP)
	}
	if p.TP > 1 && pp.Kind(p.Schedule) == pp.ZBH1 {
		return fmt.Errorf("parallel.plan: schedule=zb-h1 with tp=%d: the split backward (B and W apart) is not tensor-parallel yet; use 1f1b, gpipe or interleaved", p.TP)
	}
	if _, err := pp.Build(pp.Config{Kind: pp.Kind(p.Schedule), PP: p.PP, VPP: p.VPP, Micro: accum}); err != nil {
		return fmt.Errorf("parallel.plan: %w (micro-batches = train.global_batch / (dp × train.micro_batch) = %d)", err, accum)
	}
	if _, err := plan.ChunkLayers(j.Model.Layers, p.PP, p.VPP); err != nil {
		return fmt.Errorf("model.%w", err)
	}
	return nil
}

// newPipeState builds the pipeline rank's groups and state (the
// Strategy). The data-parallel groups are joinDP's.
func newPipeState(r *rank, hyper optim.Hyper) (Strategy, error) {
	p := r.set.enginePlan
	m, err := r.mesh(p)
	if err != nil {
		return nil, err
	}
	co, err := m.Coords(r.id)
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	ranks, err := m.Group(r.id, mesh.PP)
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	me := co.Get(mesh.PP)
	r.dp = co.Get(mesh.DP)
	if p.DP > 1 {
		if err := r.joinDP(p); err != nil {
			return nil, err
		}
	}
	pi := &pipe{}
	r.pipe = pi
	if pi.layout, err = pp.NewLayout(r.job.Model, p.PP, p.VPP, me); err != nil {
		return nil, err
	}
	if pi.sched, err = pp.Build(pp.Config{Kind: pp.Kind(p.Schedule), PP: p.PP, VPP: p.VPP, Micro: r.set.accum}); err != nil {
		return nil, err
	}
	pg, err := r.world.NewGroup("pipe."+m.GroupName(mesh.PP), ranks)
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	pi.groups = append(pi.groups, pg)
	var tied comm.Group
	if me == 0 || me == p.PP-1 {
		if tied, err = r.world.NewGroup(fmt.Sprintf("pp.tied.%d-%d", ranks[0], ranks[p.PP-1]), []int{ranks[0], ranks[p.PP-1]}); err != nil {
			return nil, fmt.Errorf("train: %w", err)
		}
		pi.groups = append(pi.groups, tied)
	}
	if pi.link, err = pp.NewP2PLink(r.world, m.GroupName(mesh.PP), ranks, me, p.VPP); err != nil {
		return nil, err
	}
	pi.state, err = pp.NewState(pp.StateConfig{Model: r.job.Model, Units: pi.layout.Units, Device: r.dev, Kernels: r.k,
		Hyper: hyper, DP: r.grads, ZeRO: p.ZeRO, Pipe: pg, Tied: tied, OwnsEmbedding: me == 0,
		Part: r.part, ReduceNorm: r.reduceNorm()})
	if err != nil {
		return nil, err
	}
	return pi.state, nil
}

// heldUnits are the units whose weights this rank's runner fetches: a
// pipeline stage's (the 16-bit copy holds them only); nil: every unit.
func (r *rank) heldUnits() []int {
	if r.pipe == nil {
		return nil
	}
	return r.pipe.layout.Units
}

// start makes the executor once the model runner exists.
func (pi *pipe) start(r *rank, tr *trace.Tracer) error {
	var err error
	pi.stage, err = pp.NewStage(pp.StageConfig{GPT: r.gpt, Params: pi.state, Schedule: pi.sched, Layout: pi.layout,
		Link: pi.link, Device: r.dev, Trace: tr})
	return err
}

func (pi *pipe) free() {
	if pi.stage != nil {
		pi.stage.Free()
	}
	if pi.link != nil {
		pi.link.Close()
	}
	for _, g := range pi.groups {
		g.Close()
	}
}

// stepPipe runs optimizer step s through the pipeline: the schedule's
// micro-batches k = 0..m−1 are the data-parallel rank's slices, as in
// step; the loss is the last stage's mean, shared with every rank. Under
// fp16 the backward starts from S·loss and the update is the scaled one
// (pp.State.UpdateScaled), as in step.
func (r *rank) stepPipe(s int, pos data.Position) (stepResult, error) {
	res := stepResult{lr: r.sched.At(s)}
	if err := r.st.BeginStep(); err != nil {
		return res, err
	}
	accum := r.set.accum
	batch := func(k int) (model.Batch, error) {
		t0 := time.Now()
		defer func() { r.clock.get += time.Since(t0) }()
		sl := r.slice(k)
		if err := r.loader.Micro(pos, sl, r.in, r.tgt); err != nil {
			return model.Batch{}, err
		}
		return model.Batch{Inputs: r.in, Targets: r.tgt, Step: int64(s), Sample: int(sl.First(pos) - pos.Sample)}, nil
	}
	r.beginFB()
	sum, err := r.pipe.stage.Step(batch, float32(r.dlossScale()/float64(accum)))
	r.endFB()
	if err != nil {
		return res, err
	}
	if err := r.st.FinishGrads(); err != nil {
		return res, err
	}
	if err := r.update(&res); err != nil {
		return res, err
	}
	t1 := time.Now()
	res.loss, err = r.lastStageMean(sum / float64(accum))
	r.clock.lossMean += time.Since(t1)
	return res, err
}

// lastStageMean averages x of the last pipeline stages over the
// data-parallel replicas; every rank gets it. Under tensor parallelism
// every rank of a last stage's group has the same x: rank 0 adds it.
func (r *rank) lastStageMean(x float64) (float64, error) {
	if !r.pipe.layout.Last() || r.part.Rank != 0 {
		x = 0
	}
	hi := float32(x)
	buf := []float32{hi, float32(x - float64(hi))}
	if err := comm.AllReduce(r.world, comm.F32(buf), comm.Sum); err != nil {
		return 0, err
	}
	return (float64(buf[0]) + float64(buf[1])) / float64(r.set.enginePlan.DP), nil
}

// CommStats adds the point-to-point traffic to the state's.
func (pi *pipe) commStats() comm.Stats { return pi.state.CommStats().Add(pi.stage.CommStats()) }

// commBytes splits the pipeline rank's payload bytes by mesh axis: the
// data-parallel group's, the stage links' plus the tied embedding's, and
// the tensor-parallel group tpg's (nil: none).
func (pi *pipe) commBytes(tpg comm.Group) CommBytes {
	all, dp := pi.commStats().Bytes, pi.state.DPStats().Bytes
	b := CommBytes{DP: dp, PP: all - dp}
	if tpg != nil {
		b.TP = tpg.Stats().Bytes
	}
	return b
}
