package train

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"time"
	"trellis/metrics"

	"trellis/comm"
	"trellis/data"
	"trellis/device"
	"trellis/mesh"
	"trellis/model"
	"trellis/ops"
	"trellis/optim"
	"trellis/parallel"
	"trellis/parallel/pp"
	"trellis/parallel/zero"
	"trellis/plan"
	"trellis/precision"
	"trellis/rng"
	"trellis/trace"
)

// rank is one rank's program, composed once from the plan: its device
// and kernels, its groups (topology), its state strategy (parallel/zero
// over the pipeline stage's units and the rank's tensor-parallel part),
// the model runner, and the pipeline executor that runs every step (a run
// without a pipeline is a pipeline of one stage).
type rank struct {
	id     int
	job    Job
	set    settings
	dev    *device.Device
	k      ops.Backend
	top    *topology
	pol    precision.Policy
	gpt    *model.GPT
	pair   *model.GPT // ep_overlap=on: the paired forwards' runner (parallel/pp's Config.Pair), nil otherwise
	st     parallel.Strategy
	stage  *pp.Stage
	sched  *pp.Schedule
	loader *data.Loader
	world  comm.Group // every rank: loss and statistics reductions
	lr     optim.Schedule
	in     []int32  // (B,T), or under cp the rank's (B,T/cp)
	tgt    []int32  // (B,T), or under cp the rank's (B,T/cp)
	ranges [][2]int // cp > 1: the rank's token ranges of every sequence (model.CPRanges); nil: all
	log    *slog.Logger
	tr     *trace.Tracer   // nil: no tracing
	ctx    context.Context // the run's; checked between micro-batches and units (nil: never cancelled)
	stopc  <-chan struct{} // Options.Stop: closed asks for a graceful stop after the step

	scaler *optim.LossScaler // dynamic loss scaling (nil without)

	clock stepClock // the measured split of step time (split.go)
}

// rankConfig is what newRank needs besides the job.
type rankConfig struct {
	job    Job
	set    settings
	world  comm.Group
	loader *data.Loader
	log    *slog.Logger
	trace  *trace.Tracer
}

func newRank(rc rankConfig) (*rank, error) {
	j, s := rc.job, rc.set
	id := rc.world.Rank()
	r := &rank{id: id, job: j, set: s, world: rc.world, loader: rc.loader, log: rc.log, tr: rc.trace, pol: s.policy}
	r.dev = device.New(device.Config{ID: id, Budget: s.budget})
	k, err := ops.New(ops.Config{Threads: s.threads})
	if err != nil {
		return nil, err
	}
	r.k = k
	r.lr = optim.Schedule{Warmup: s.warmup, Steps: j.Train.Steps, LR: j.Train.LR, MinLR: j.Train.MinLR}
	if err := r.lr.Validate(); err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	if sc := r.pol.LossScale; sc.Dynamic {
		if r.scaler, err = optim.NewLossScaler(sc.Initial, sc.Window); err != nil {
			return nil, fmt.Errorf("train: %w", err)
		}
	}
	hyper := optim.Hyper{Beta1: j.Train.Beta1, Beta2: j.Train.Beta2, Eps: j.Train.Eps, WeightDecay: j.Train.WeightDecay}
	if err := hyper.Validate(); err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	p := s.enginePlan
	if r.top, err = newTopology(rc.world, j.Model, p); err != nil {
		return nil, err
	}
	if err := r.compose(hyper); err != nil {
		r.free()
		return nil, err
	}
	n := j.Train.MicroBatch * j.Model.SeqLen / max(1, p.CP)
	if p.CP > 1 {
		if r.ranges, err = model.CPRanges(j.Model.SeqLen, p.CP, r.top.coords.Get(mesh.CP), false); err != nil {
			r.free()
			return nil, fmt.Errorf("train: %w", err)
		}
	}
	r.in, r.tgt = make([]int32, n), make([]int32, n)
	if err := r.dev.Reserve(device.Act, int64(2*n*4)); err != nil { // the token buffers
		r.free()
		return nil, err
	}
	return r, nil
}

// compose builds the rank's state, runner and executor. State first, as
// the seed's formula lists it; then the runner's scratch; the stashes
// come with the executor's first step.
func (r *rank) compose(hyper optim.Hyper) error {
	j, s, t := r.job, r.set, r.top
	p := s.enginePlan
	kind := pp.OneFOneB // one stage: forward and backward of each micro-batch in turn
	if p.PP > 1 {
		kind = pp.Kind(p.Schedule)
	}
	sched, err := pp.Build(pp.Config{Kind: kind, PP: p.PP, VPP: p.VPP, Micro: s.accum, Pair: p.EPOverlap})
	if err != nil {
		return err
	}
	r.sched = sched
	sh := stateShape(j, s, p, t.part, t.layout)
	train, eval := pp.WeightOrder(sched, t.layout, p.Recompute == plan.RecomputeFull)
	zc := zero.Config{Model: j.Model, Layout: sh.Layout, Copy: r.copies, Stage: p.ZeRO, Grads: t.grads, Params: t.params,
		NormGroups: t.normGroups(), Stages: t.pipe, Precision: r.pol, Device: r.dev, Kernels: r.k, Hyper: hyper,
		BucketElems: sh.BucketElems, Breaks: sh.Breaks, Overlap: sh.Overlap, Prefetch: j.Parallel.Prefetch,
		Order: zero.Order{Train: train, Eval: eval}}
	if len(sh.TiedUnits) > 0 {
		zc.Tied, zc.TiedUnits = t.tied, sh.TiedUnits
	}
	if t.ep != nil {
		if r.st, err = newEPState(zc, t); err != nil {
			return err
		}
	} else {
		st, err := zero.New(zc)
		if err != nil {
			return err
		}
		r.st = st
	}
	// Goroutine peers: see model.Options.Unpinned.
	unpinned := !s.processes && s.ranks > 1
	runner := func(paired bool) (*model.GPT, error) {
		return model.New(model.Options{Model: j.Model, Kernels: r.k, Device: r.dev, MicroBatch: j.Train.MicroBatch,
			Seed: j.Train.Seed, Part: t.part, TP: t.tpComm(), Flash: p.Flash, Recompute: engineRecompute(p.Recompute),
			Precision: r.pol, Unpinned: unpinned, CP: t.cpComm(), EP: t.epComm(paired)})
	}
	if r.gpt, err = runner(false); err != nil {
		return err
	}
	if p.EPOverlap { // the paired forwards' runner: its own scratch (tag workspace), the rank's Params, statistics and biases
		if r.pair, err = runner(true); err != nil {
			return err
		}
		if err := r.pair.ShareRouting(r.gpt); err != nil {
			return err
		}
	}
	var link pp.Link
	if t.link != nil {
		link = t.link
	}
	// zb-h1's W runs ahead only when it communicates with nobody (see
	// pp.StageConfig.RunAhead): not under tensor parallelism, nor with
	// ZeRO-2/3 over data-parallel replicas, whose W completes buckets (a
	// reduce-scatter) and, under full recomputation, gathers weights.
	ahead := p.TP == 1 && p.CP <= 1 && (p.ZeRO < 2 || p.DP == 1)
	r.stage, err = pp.NewStage(pp.StageConfig{GPT: r.gpt, Params: r.units(), Schedule: sched, Layout: t.layout,
		Link: link, Device: r.dev, Trace: r.tr, RunAhead: ahead, Pair: r.pair, Token: t.tok})
	return err
}

// stateShape is how a rank of plan p holding the tensor-parallel part
// part of pipeline layout l configures its state (parallel/zero), for the
// strategy it builds and for the memory the run predicts: the stage's
// units of part's layout; the job's buckets and overlap, a bucket starting
// at each chunk; under a pipeline the tied embedding (GPT-2's, a tied
// Llama's) summed between the first and last stage and, for ZeRO 0 and 1,
// one bucket reduced after the
// flush (the stage's backward passes interleave micro-batches, so a
// bucket's last one is not known before it).
func stateShape(j Job, s settings, p plan.Plan, part model.Part, l pp.Layout) zero.Shape {
	sh := zero.Shape{Layout: j.Model.PartLayout(part).Select(l.Units), Stage: p.ZeRO, Ranks: p.DP * max(1, p.CP),
		BucketElems: int(s.bucket / 4), Breaks: l.Breaks(), Overlap: j.Parallel.Overlap, Mixed: s.policy.Mixed(), Accum: s.accum,
		Untied: !j.Model.Tied()}
	if p.PP > 1 {
		sh.Split = pp.Kind(p.Schedule).Split()
		if l.TiedAcross() {
			sh.TiedUnits = []int{0}
		}
		if p.ZeRO < 2 {
			sh.BucketElems, sh.Overlap, sh.Breaks = -1, false, nil
		}
	}
	return sh
}

// copies says which of the rank's tensors another rank saves and counts
// in the gradient norm: a tensor every tensor-parallel rank holds alike
// (rank 0 counts it), and the tied embedding on the last pipeline stage
// (the first counts it).
func (r *rank) copies(unit int, t model.Tensor) bool {
	return (t.Replicated && r.top.part.Rank != 0) || (unit == 0 && !r.top.layout.First())
}

func (r *rank) free() {
	if r.stage != nil {
		r.stage.Free()
	}
	if r.gpt != nil {
		r.gpt.Free()
	}
	if r.pair != nil {
		r.pair.Free()
	}
	if r.st != nil {
		r.st.Free()
	}
	if r.top != nil {
		r.top.close()
	}
}

// stepResult is one optimizer step as this rank saw it.
type stepResult struct {
	loss float64 // mean loss over the global batch (every rank agrees)
	norm float64 // global gradient norm before clipping
	lr   float64

	skipped bool    // loss scaling: the gradients overflowed and the step was skipped
	scale   float64 // loss scaling: the scale the step ran with (0 otherwise)

	experts *metrics.Experts // an MoE model's routing over the step (expertStats)
}

// step runs optimizer step s (0-based: s updates already applied) on the
// global batch starting at pos: the rank's schedule over the step's
// micro-batches k = 0..m−1 (the data-parallel rank's slices), the
// gradients' reduction, the update, and the loss — the last stage's mean,
// shared with every rank. Under loss scaling the backward starts from
// S·loss and the update is the scaled one.
func (r *rank) step(s int, pos data.Position) (stepResult, error) {
	res := stepResult{lr: r.lr.At(s)}
	accum := r.set.accum
	if err := r.st.BeginStep(accum); err != nil {
		return res, err
	}
	batch := func(k int) (model.Batch, error) {
		if err := interrupted(r.ctx); err != nil {
			return model.Batch{}, err
		}
		t0 := time.Now()
		defer func() { r.clock.get += time.Since(t0) }()
		sl := r.slice(k)
		if err := r.loader.MicroRanges(pos, sl, r.ranges, r.in, r.tgt); err != nil {
			return model.Batch{}, err
		}
		return model.Batch{Inputs: r.in, Targets: r.tgt, Step: int64(s), Sample: int(sl.First(pos) - pos.Sample)}, nil
	}
	r.beginFB()
	sum, err := r.stage.Step(batch, float32(r.dlossScale()/float64(accum)))
	r.endFB()
	if err != nil {
		return res, err
	}
	t0 := r.tr.Now()
	if err := r.st.FinishGrads(); err != nil {
		return res, err
	}
	r.tr.Span(trace.Wait, "finish grads", t0)
	if err := r.update(&res); err != nil {
		return res, err
	}
	if err := r.fp8Sync(); err != nil {
		return res, err
	}
	t1 := time.Now()
	res.loss, err = r.lossMean(sum / float64(accum))
	if err == nil {
		res.experts, err = r.expertStats(accum)
	}
	if err == nil {
		err = r.updateBias(res.experts)
	}
	r.clock.lossMean += time.Since(t1)
	return res, err
}

func (r *rank) slice(k int) data.Slice {
	p := r.set.enginePlan
	return data.Slice{GlobalBatch: r.job.Train.GlobalBatch, MicroBatch: r.job.Train.MicroBatch, Rank: r.top.dp, Ranks: p.DP, Micro: k}
}

// lossMean is the mean over the data-parallel replicas (and the
// context-parallel ranks, each holding the mean over its equal share of
// the tokens) of a loss x that the ranks running the model's last stage
// hold; every rank gets it.
// Without a pipeline every rank holds it (the tensor-parallel ranks of a
// replica alike) and it is averaged over the world in fp32; with one, the
// last stages' values are summed as float64 pairs (hi = fl32(x), lo =
// fl32(x − hi)), tensor-parallel rank 0 of each adding its replica's.
func (r *rank) lossMean(x float64) (float64, error) {
	p := r.set.enginePlan
	if p.PP == 1 {
		if r.world.Size() == 1 {
			return x, nil
		}
		buf := []float32{float32(x)}
		if err := comm.AllReduce(r.world, comm.F32(buf), comm.Avg); err != nil {
			return 0, err
		}
		return float64(buf[0]), nil
	}
	if !r.top.layout.Last() || r.top.part.Rank != 0 {
		x = 0
	}
	hi := float32(x)
	buf := []float32{hi, float32(x - float64(hi))}
	if err := comm.AllReduce(r.world, comm.F32(buf), comm.Sum); err != nil {
		return 0, err
	}
	return (float64(buf[0]) + float64(buf[1])) / float64(p.DP*max(1, p.CP)), nil
}

// eval returns the mean validation loss over EvalBatches micro-batches per
// rank (rank r reads micro-batches r, r+R, ... of the validation windows),
// through the pipeline.
func (r *rank) eval() (float64, error) {
	sum, ok, err := r.evalSum(func(b model.Batch) (float64, error) { return r.stage.Eval(b) })
	if !ok || err != nil {
		return math.NaN(), err
	}
	return r.lossMean(sum)
}

// evalSum is this rank's mean of loss over its validation micro-batches;
// ok is false when there are none to read.
func (r *rank) evalSum(loss func(model.Batch) (float64, error)) (mean float64, ok bool, err error) {
	nb := r.job.Train.EvalBatches
	B := int64(r.job.Train.MicroBatch)
	avail := r.loader.ValSamples()
	if nb == 0 || avail < B {
		return 0, false, nil
	}
	R := int64(r.set.enginePlan.DP)
	var sum float64
	for i := 0; i < nb; i++ {
		first := ((int64(i)*R + int64(r.top.dp)) * B) % (avail - B + 1)
		if err := r.loader.ValBatchRanges(first, int(B), r.ranges, r.in, r.tgt); err != nil {
			return 0, false, err
		}
		l, err := loss(model.Batch{Inputs: r.in, Targets: r.tgt, Eval: true})
		if err != nil {
			return 0, false, err
		}
		sum += l
	}
	return sum / float64(nb), true, nil
}

// generate continues prompt by n tokens, sampling with temperature and top-k
// from a stream keyed by seed. Every rank runs it (under ZeRO-3 the weights
// are gathered collectively) and gets the same text.
func (r *rank) generate(prompt string, n int, temperature float64, topK int, seed uint64) (string, error) {
	if pp := r.set.enginePlan.PP; pp > 1 {
		return "", fmt.Errorf("train: sampling needs the whole model, which pp=%d splits over stages: run trellis sample on a checkpoint", pp)
	}
	if cp := r.set.enginePlan.CP; cp > 1 {
		return "", fmt.Errorf("train: sampling needs whole sequences, which cp=%d splits over ranks: run trellis sample on a checkpoint", cp)
	}
	var txt string
	err := r.stage.Sample(func(st *model.Stash) error {
		var err error
		txt, err = Generate(GenerateConfig{GPT: r.gpt, Params: r.units(), Stash: st, Tokenizer: r.loader.Tokenizer(),
			Prompt: prompt, Tokens: n, Temperature: temperature, TopK: topK, Seed: seed})
		return err
	})
	return txt, err
}

// GenerateConfig is what Generate needs.
type GenerateConfig struct {
	GPT         *model.GPT
	Params      model.Params
	Stash       *model.Stash // scratch; must not hold a pending backward
	Tokenizer   data.Tokenizer
	Prompt      string
	Tokens      int     // how many tokens to add
	Temperature float64 // 0: greedy
	TopK        int     // 0: the whole vocabulary
	Seed        uint64
	// Out, if set, receives each token's text as soon as it is drawn, and
	// Generate returns "" and holds only the last seq_len tokens: memory
	// and time to the first output do not grow with Tokens.
	Out io.Writer
}

// Generate samples Tokens tokens after Prompt. Token i is drawn by inverse
// transform from softmax(logits/temperature) restricted to the top-k
// logits, with the uniform variate rng.Key(seed, "sample").Uniform(i), so the
// same seed gives the same text on every rank and every run. The draw is
// over the ids below min(model vocab, tokenizer vocab): those the model
// outputs and the tokenizer decodes.
func Generate(c GenerateConfig) (string, error) {
	cfg := c.GPT.Config()
	if err := checkPrompt(c.Tokenizer, c.Prompt, cfg.Vocab, "prompt"); err != nil {
		return "", err
	}
	ids := c.Tokenizer.Encode(c.Prompt)
	if len(ids) == 0 {
		ids = []int32{0}
	}
	logits := make([]float32, cfg.Vocab)
	key := rng.Key(c.Seed, "sample")
	start := len(ids)
	for i := 0; i < c.Tokens; i++ {
		ctx := ids
		if len(ctx) > cfg.SeqLen {
			ctx = ctx[len(ctx)-cfg.SeqLen:]
		}
		if err := c.GPT.Logits(c.Params, c.Stash, ctx, logits); err != nil {
			return "", err
		}
		id := pick(logits, min(cfg.Vocab, c.Tokenizer.VocabSize()), c.Temperature, c.TopK, key.Uniform(uint64(i)))
		if c.Out == nil {
			ids = append(ids, id)
			continue
		}
		if _, err := io.WriteString(c.Out, c.Tokenizer.Decode([]int32{id})); err != nil {
			return "", fmt.Errorf("sample: %w", err)
		}
		if len(ids) >= cfg.SeqLen { // keep the context window only
			ids = append(ids[:0], ids[len(ids)-cfg.SeqLen+1:]...)
		}
		ids = append(ids, id)
	}
	if c.Out != nil {
		return "", nil
	}
	return c.Tokenizer.Decode(ids[start:]), nil
}
