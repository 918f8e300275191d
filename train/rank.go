package train

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"time"

	"trellis/comm"
	"trellis/data"
	"trellis/device"
	"trellis/mesh"
	"trellis/model"
	"trellis/ops"
	"trellis/optim"
	"trellis/parallel/dp"
	"trellis/parallel/single"
	"trellis/parallel/tp"
	"trellis/parallel/zero"
	"trellis/plan"
	"trellis/rng"
	"trellis/tensor"
	"trellis/trace"
)

// rank is one rank's program: its device, kernels, model runner, activation
// stash, strategy and view of the data.
type rank struct {
	id     int
	job    Job
	set    settings
	dev    *device.Device
	k      *ops.Kernels
	gpt    *model.GPT
	stash  *model.Stash
	st     Strategy
	loader *data.Loader
	world  comm.Group // every rank: loss and statistics reductions
	grads  comm.Group // the data-parallel group's gradient traffic (nil: one device)
	params comm.Group // the data-parallel group's parameter gathers (nil: one device)
	dp     int        // this rank's index in its data-parallel group
	sched  optim.Schedule
	in     []int32 // (B,T)
	tgt    []int32 // (B,T)
	log    *slog.Logger
	pipe   *pipe         // pipeline parallelism (nil: pp=1)
	tr     *trace.Tracer // nil: no tracing

	// Tensor parallelism (train/tp.go).
	tp      *tp.Comm        // the tensor-parallel group's points (nil: tp=1)
	tpGroup comm.Group      // its group
	part    model.Part      // the piece of the model this rank computes
	ctx     context.Context // the run's; checked between micro-batches and units (nil: never cancelled)
	stopc   <-chan struct{} // Options.Stop: closed asks for a graceful stop after the step

	scaler *optim.LossScaler // fp16's dynamic loss scale (nil otherwise)

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
	r := &rank{id: id, job: j, set: s, world: rc.world, loader: rc.loader, log: rc.log, dp: id, tr: rc.trace}
	r.dev = device.New(device.Config{ID: id, Budget: s.budget, MasterWeights: s.enginePlan.Precision == plan.BF16 || s.enginePlan.Precision == plan.FP16})
	var err error
	if r.k, err = ops.New(ops.Config{Threads: s.threads}); err != nil {
		return nil, err
	}
	r.sched = optim.Schedule{Warmup: s.warmup, Steps: j.Train.Steps, LR: j.Train.LR, MinLR: j.Train.MinLR}
	if err := r.sched.Validate(); err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	if r.scaler, err = newScaler(s.enginePlan.Precision, j.Train); err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	hyper := optim.Hyper{Beta1: j.Train.Beta1, Beta2: j.Train.Beta2, Eps: j.Train.Eps, WeightDecay: j.Train.WeightDecay}
	if err := hyper.Validate(); err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	if err := r.joinTP(s.enginePlan); err != nil {
		r.free()
		return nil, err
	}
	// State first, as the seed's formula lists it; then the runner's scratch
	// and one micro-batch's activations.
	st, err := newStrategy(r, hyper)
	if err != nil {
		r.free() // the groups (a failed strategy holds nothing)
		return nil, err
	}
	r.st = st
	if r.gpt, err = model.New(model.Options{Model: j.Model, Kernels: r.k, Device: r.dev, MicroBatch: j.Train.MicroBatch, Seed: j.Train.Seed,
		Part: r.part, TP: r.tpComm(), Flash: r.set.enginePlan.Flash, Compute: computeType(r.set.enginePlan.Precision),
		HalfPerUnit: r.set.enginePlan.ZeRO == 3 || zeroHalf(r.set.enginePlan) != tensor.F32, Recompute: engineRecompute(r.set.enginePlan.Recompute), Units: r.heldUnits(),
		Unpinned: !s.processes && s.ranks > 1}); err != nil { // goroutine peers: see model.Options.Unpinned
		r.free()
		return nil, err
	}
	if r.pipe != nil {
		err = r.pipe.start(r, r.tr)
	} else {
		r.stash, err = r.gpt.NewStash()
	}
	if err != nil {
		r.free()
		return nil, err
	}
	n := j.Train.MicroBatch * j.Model.SeqLen
	r.in, r.tgt = make([]int32, n), make([]int32, n)
	if err := r.dev.Reserve(device.Act, int64(2*n*4)); err != nil { // the token buffers
		r.free()
		return nil, err
	}
	return r, nil
}

// newStrategy picks the implementation of the plan's state placement:
// the single-device reference for dp=1,zero=0, data parallelism (package
// parallel/dp) for zero=0, ZeRO (package parallel/zero) otherwise.
func newStrategy(r *rank, hyper optim.Hyper) (Strategy, error) {
	p := r.set.enginePlan
	if p.PP > 1 {
		return newPipeState(r, hyper)
	}
	if p.DP == 1 && p.ZeRO == 0 {
		return single.New(single.Config{Model: r.job.Model, Device: r.dev, Kernels: r.k, Hyper: hyper,
			Part: r.part, ReduceNorm: r.reduceNorm()})
	}
	if err := r.joinDP(p); err != nil {
		return nil, err
	}
	decay := single.DecayPart(r.job.Model, r.part)
	elems := int(r.set.bucket / 4)
	if p.ZeRO == 0 {
		return dp.New(dp.Config{Model: r.job.Model, Group: r.grads, Device: r.dev, Kernels: r.k,
			Hyper: hyper, Decay: decay, BucketElems: elems, Overlap: r.job.Parallel.Overlap,
			Part: r.part, ReduceNorm: r.reduceNorm()})
	}
	return zero.New(zero.Config{Model: r.job.Model, Stage: p.ZeRO, Grads: r.grads, Params: r.params,
		Device: r.dev, Kernels: r.k, Hyper: hyper, Decay: decay, BucketElems: elems,
		Overlap: r.job.Parallel.Overlap, Prefetch: r.job.Parallel.Prefetch,
		Part: r.part, ReduceNorm: r.reduceNorm(), Half: zeroHalf(p)})
}

// joinDP makes this rank's data-parallel groups, the ranks along the mesh's
// dp axis: one for gradient reductions and one for parameter gathers, each
// with its own queue and both apart from the world group the loop uses for
// statistics.
func (r *rank) joinDP(p plan.Plan) error {
	m, err := r.mesh(p)
	if err != nil {
		return err
	}
	ranks, err := m.Group(r.id, mesh.DP)
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	name := m.GroupName(mesh.DP)
	if r.grads, err = r.world.NewGroup("grad."+name, ranks); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	if r.params, err = r.world.NewGroup("param."+name, ranks); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	r.dp = r.grads.Rank()
	return nil
}

func (r *rank) free() {
	if r.pipe != nil {
		r.pipe.free()
	}
	if r.stash != nil {
		r.stash.Free()
	}
	if r.gpt != nil {
		r.gpt.Free()
	}
	if r.st != nil {
		r.st.Free()
	}
	for _, g := range []comm.Group{r.grads, r.params, r.tpGroup} {
		if g != nil {
			g.Close()
		}
	}
}

// stepResult is one optimizer step as this rank saw it.
type stepResult struct {
	loss float64 // mean loss over the global batch (every rank agrees)
	norm float64 // global gradient norm before clipping
	lr   float64

	skipped bool    // fp16: the gradients overflowed and the step was skipped
	scale   float64 // fp16: the loss scale the step ran with (0 otherwise)
}

// step runs optimizer step s (0-based: s updates already applied) on the
// global batch starting at pos.
func (r *rank) step(s int, pos data.Position) (stepResult, error) {
	if r.pipe != nil {
		return r.stepPipe(s, pos)
	}
	res := stepResult{lr: r.sched.At(s)}
	if err := r.st.BeginStep(); err != nil {
		return res, err
	}
	accum := r.set.accum
	var sum float64
	for k := 0; k < accum; k++ {
		if err := interrupted(r.ctx); err != nil {
			return res, err
		}
		sl := r.slice(k)
		if err := r.loader.Micro(pos, sl, r.in, r.tgt); err != nil {
			return res, err
		}
		b := model.Batch{Inputs: r.in, Targets: r.tgt, Step: int64(s), Sample: int(sl.First(pos) - pos.Sample)}
		r.st.BeginMicro(k, accum)
		r.beginFB()
		t0 := r.tr.Now()
		loss, err := r.gpt.Forward(r.units(), r.stash, b)
		if err != nil {
			return res, err
		}
		t1 := r.tr.Now()
		if err := r.gpt.Backward(r.units(), r.stash, float32(r.dlossScale()/float64(accum))); err != nil {
			return res, err
		}
		r.endFB()
		if r.tr != nil {
			r.tr.SpanTo(trace.Compute, fmt.Sprintf("F mb%d", k), t0, t1, "mb", k)
			r.tr.Span(trace.Compute, fmt.Sprintf("B mb%d", k), t1, "mb", k)
		}
		sum += float64(loss)
	}
	t0 := r.tr.Now()
	if err := r.st.FinishGrads(); err != nil {
		return res, err
	}
	r.tr.Span(trace.Wait, "finish grads", t0)
	if err := r.update(&res); err != nil {
		return res, err
	}
	var err error
	t1 := time.Now()
	res.loss, err = r.mean(sum / float64(accum))
	r.clock.lossMean += time.Since(t1)
	return res, err
}

func (r *rank) slice(k int) data.Slice {
	p := r.set.enginePlan
	return data.Slice{GlobalBatch: r.job.Train.GlobalBatch, MicroBatch: r.job.Train.MicroBatch, Rank: r.dp, Ranks: p.DP, Micro: k}
}

// mean averages x over the data-parallel ranks (every rank gets the result).
func (r *rank) mean(x float64) (float64, error) {
	if r.world.Size() == 1 {
		return x, nil
	}
	buf := []float32{float32(x)}
	if err := comm.AllReduce(r.world, comm.F32(buf), comm.Avg); err != nil {
		return 0, err
	}
	return float64(buf[0]), nil
}

// eval returns the mean validation loss over EvalBatches micro-batches per
// rank (rank r reads micro-batches r, r+R, ... of the validation windows),
// through the pipeline when there is one.
func (r *rank) eval() (float64, error) {
	if r.pipe != nil {
		sum, ok, err := r.evalSum(func(b model.Batch) (float64, error) { return r.pipe.stage.Eval(b) })
		if !ok || err != nil {
			return math.NaN(), err
		}
		return r.lastStageMean(sum)
	}
	sum, ok, err := r.evalSum(func(b model.Batch) (float64, error) {
		loss, err := r.gpt.EvalForward(r.units(), r.stash, b)
		return float64(loss), err
	})
	if !ok || err != nil {
		return math.NaN(), err
	}
	return r.mean(sum)
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
		first := ((int64(i)*R + int64(r.dp)) * B) % (avail - B + 1)
		if err := r.loader.ValBatch(first, int(B), r.in, r.tgt); err != nil {
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
	if r.pipe != nil {
		return "", fmt.Errorf("train: sampling needs the whole model, which pp=%d splits over stages: run trellis sample on a checkpoint", r.set.enginePlan.PP)
	}
	return Generate(GenerateConfig{
		GPT: r.gpt, Params: r.units(), Stash: r.stash, Tokenizer: r.loader.Tokenizer(),
		Prompt: prompt, Tokens: n, Temperature: temperature, TopK: topK, Seed: seed,
	})
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
