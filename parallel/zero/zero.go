// Package zero is ZeRO (Rajbhandari et al. 2020) stages 1 to 3: data
// parallelism whose N ranks shard, instead of replicate, the training state.
//
// The flat parameter vector is cut into buckets (parallel/flat), each padded
// to a multiple of N and split into N equal chunks; rank r owns chunk r of
// every bucket. With fp32 weights and gradients (4 bytes each) and Adam's
// two moments (8 bytes), Ψ parameters cost per rank:
//
//	stage 1  optimizer states sharded          param 4Ψ    grad 4Ψ    optim 8Ψ/N
//	stage 2  + gradients sharded               param 4Ψ    grad 4Ψ/N  optim 8Ψ/N
//	stage 3  + parameters sharded              param 4Ψ/N  grad 4Ψ/N  optim 8Ψ/N
//
// plus communication buffers, charged to the device tag comm (Shape.Memory
// bounds them):
//
//   - stages 2 and 3: a bucket's full gradient lives from its first
//     Grads(u) in a micro-batch until its reduce-scatter completes (the
//     watcher frees it at once): the bucket being filled, the one being
//     reduced (at most one reduction is in flight — with slow links the
//     backward pass waits rather than piling up full gradients) and the
//     embedding's bucket, whose gradient the tied LM head starts at the top
//     of the backward pass and the embedding finishes at its bottom.
//     Micro-batches after a step's first also hold the in-flight
//     reduction's destination chunk, added into the shard once it lands.
//   - stage 3: the gathered parameters of the bucket in use and of the one
//     prefetched (the next unit is the one after it in the model's declared
//     call order, model.Config.WeightOrder: see predictor), the embedding's
//     kept from the LM head's forward to its backward.
//
// The collectives, per bucket b (chunk c, Avg the mean over ranks):
//
//	stage 1  last micro-batch:   g_b[r·c:(r+1)·c] ← Avg_ranks g_b[r·c:(r+1)·c]  (in-place reduce-scatter)
//	         after the update:   w_b ← all-gather of every rank's w_b[r·c:(r+1)·c]  (in place)
//	stage 2  every micro-batch:  shard_b += Avg_ranks chunk r of this micro-batch's g_b
//	         after the update:   the same all-gather as stage 1
//	stage 3  before each use:    w_b ← all-gather(shards), freed after use
//	         every micro-batch:  as stage 2
//
// Reduce-scatters go on the gradient group, all-gathers on the parameter
// group (two queues, so a prefetch does not wait behind a reduction). The
// updated parameters' all-gather of stages 1 and 2 is waited for lazily, at
// the bucket's first use. The global gradient norm for clipping is
// √(Σ_ranks Σ_own chunks g²): each rank sums its shards (optim.SumSquares)
// and one all-reduce adds the partials.
//
// Every rank makes the same decisions from the same sequence of calls, so
// the ranks issue the same collectives in the same order.
package zero

import (
	"errors"
	"fmt"

	"trellis/comm"
	"trellis/device"
	"trellis/model"
	"trellis/ops"
	"trellis/optim"
	"trellis/parallel/flat"
	"trellis/tensor"
)

// Config is everything New needs.
type Config struct {
	Model model.Config
	Stage int // 1, 2 or 3
	// Grads carries the reduce-scatters and the gradient norm's all-reduce;
	// Params the all-gathers. Both hold the same ranks in the same order
	// (Params may be Grads). The strategy does not close them.
	Grads, Params comm.Group
	Device        *device.Device // every allocation is charged here
	Kernels       *ops.Kernels   // the optimizer's threads
	Hyper         optim.Hyper
	Decay         []optim.Range // global ranges that get weight decay (optim.Decay2D)
	// BucketElems caps a bucket, in elements; 0: one unit per bucket.
	BucketElems int
	// Overlap reduces each bucket as soon as it is ready; false reduces
	// after the backward pass.
	Overlap bool
	// Prefetch, under stage 3, starts gathering the next unit's bucket as
	// soon as the current one is in hand.
	Prefetch bool
	// Part is the piece of the model this rank holds under tensor
	// parallelism (zero: the whole model); its flat vector is what the
	// group shards.
	Part model.Part
	// ReduceNorm adds the partial squared gradient norms of the ranks that
	// hold the other parts (nil: none).
	ReduceNorm func(sq float64) (float64, error)
	// Half, bf16 or fp16 under stages 1 and 2, shards the fp32 master
	// weights with the optimizer state and holds every weight in 16-bit
	// (half.go); the zero value, fp32, holds fp32 weights. Stage 3 ignores
	// it (its fp32 chunks are the master weights already).
	Half tensor.DType
}

// Validate names the first field that breaks its rule.
func (c Config) Validate() error {
	if err := c.Model.Validate(); err != nil {
		return err
	}
	switch {
	case c.Stage < 1 || c.Stage > 3:
		return fmt.Errorf("zero: stage=%d must be 1, 2 or 3", c.Stage)
	case c.Grads == nil || c.Params == nil:
		return errors.New("zero: Config.Grads and Config.Params must be set")
	case c.Grads.Size() != c.Params.Size() || c.Grads.Rank() != c.Params.Rank():
		return fmt.Errorf("zero: the gradient group (rank %d of %d) and the parameter group (rank %d of %d) differ",
			c.Grads.Rank(), c.Grads.Size(), c.Params.Rank(), c.Params.Size())
	case c.Device == nil:
		return errors.New("zero: Config.Device is nil")
	case c.BucketElems < 0:
		return fmt.Errorf("zero: BucketElems=%d must be >= 0", c.BucketElems)
	case c.Half != tensor.F32 && c.Half != tensor.BF16 && c.Half != tensor.F16:
		return fmt.Errorf("zero: Half=%s must be fp32, bf16 or fp16", c.Half)
	case c.Half != tensor.F32 && c.Kernels == nil:
		return fmt.Errorf("zero: Half=%s needs Config.Kernels (rounding the weights)", c.Half)
	}
	return nil
}

// bucket is one bucket's views and in-flight work on this rank.
type bucket struct {
	flat.Bucket
	lo, valid int          // own chunk = global elements [lo, lo+valid), then padding
	full      []float32    // stages 1, 2: the bucket of the full parameters (Padded); nil with Half
	full16    []uint16     // stages 1, 2 with Half: the bucket of the 16-bit weights (Padded)
	gfull     []float32    // stage 1: the bucket of the full gradients (Padded)
	p         []float32    // own chunk of the parameters (Chunk)
	g         []float32    // own chunk of the gradients (Chunk)
	opt       *optim.AdamW // over p[:valid], g[:valid]
	left      int          // units whose gradient is not final in this micro-batch
	staging   *device.Buffer
	issued    bool     // this micro-batch's reduction is issued
	ag        *flat.Op // stages 1, 2: the updated parameters' all-gather
}

// Strategy is one rank's ZeRO state; it is the model.Params its forward
// and backward passes run on.
type Strategy struct {
	cfg      Config
	tensors  []flat.Tensor
	bl       *flat.Layout
	bk       []bucket
	n, r     int            // group size and rank
	w, g     *device.Buffer // tag param and tag grad: full padded or shards (see New)
	track    flat.Tracker
	micro    int
	accum    int
	inflight []pending // reduce-scatters in issue order
	res      map[int]*gathered
	pred     predictor
	next     int            // the unit expected after the latest Weights call (-1: none)
	gathers  map[int]int    // stage 3: all-gathers issued per bucket, over the strategy's life
	wh       *device.Buffer // stages 1, 2 with Half: the 16-bit weights (Padded)
	views    map[int]*view  // stages 1, 2 with Half: the units whose widened weights are fetched
}

// New allocates the state of cfg.Stage.
func New(cfg Config) (*Strategy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	lay := cfg.Model.PartLayout(cfg.Part)
	sizes := make([]int, len(lay.Units))
	for i, u := range lay.Units {
		sizes[i] = u.Size
	}
	n, r := cfg.Grads.Size(), cfg.Grads.Rank()
	bl, err := flat.New(flat.Config{UnitSizes: sizes, MaxElems: cfg.BucketElems, Ranks: n})
	if err != nil {
		return nil, fmt.Errorf("zero: %w", err)
	}
	s := &Strategy{cfg: cfg, bl: bl, n: n, r: r, accum: 1, res: map[int]*gathered{}, next: -1, gathers: map[int]int{},
		pred: newPredictor(cfg.Model.WeightOrder())}
	s.tensors = flat.TensorsOfPart(cfg.Model, cfg.Part)
	if err := s.alloc(); err != nil {
		s.Free()
		return nil, err
	}
	return s, nil
}

// alloc charges the state: parameters full (stages 1, 2) or chunks (3);
// gradients full (1) or chunks (2, 3); optimizer states for the own chunks.
func (s *Strategy) alloc() error {
	st, pad := s.cfg.Stage, s.bl.Padded
	pn, gn := pad, pad
	if st == 3 || s.half() {
		pn = pad / s.n // the own chunks only
	}
	if st >= 2 {
		gn = pad / s.n
	}
	var err error
	if s.w, err = s.cfg.Device.Alloc(device.Param, pn); err != nil {
		return fmt.Errorf("zero: parameters: %w", err)
	}
	if s.g, err = s.cfg.Device.Alloc(device.Grad, gn); err != nil {
		return fmt.Errorf("zero: gradients: %w", err)
	}
	for _, fb := range s.bl.Buckets {
		b := bucket{Bucket: fb}
		c := fb.Chunk()
		b.lo, b.valid = fb.Shard(s.r)
		own := func(whole []float32) []float32 { return whole[s.r*c : (s.r+1)*c] }
		if st < 3 && !s.half() {
			b.full = s.w.Data[fb.POffset : fb.POffset+fb.Padded]
			b.p = own(b.full)
		} else {
			b.p = s.w.Data[fb.POffset/s.n : fb.POffset/s.n+c]
		}
		if st < 2 {
			b.gfull = s.g.Data[fb.POffset : fb.POffset+fb.Padded]
			b.g = own(b.gfull)
		} else {
			b.g = s.g.Data[fb.POffset/s.n : fb.POffset/s.n+c]
		}
		b.opt, err = optim.New(optim.Config{Params: b.p[:b.valid], Grads: b.g[:b.valid], Offset: b.lo,
			Decay: s.cfg.Decay, Hyper: s.cfg.Hyper, Device: s.cfg.Device, Kernels: s.cfg.Kernels})
		if err != nil {
			return err
		}
		s.bk = append(s.bk, b)
	}
	if s.half() {
		return s.allocHalf()
	}
	return nil
}

// Init writes the initial weights of what this rank holds: every weight
// (stages 1, 2) or its chunks (3), the same values a single device has.
func (s *Strategy) Init(seed uint64) error { return s.InitWith(model.Init{Seed: seed}) }

// InitWith is Init from in (a seed or given global weights).
func (s *Strategy) InitWith(in model.Init) error {
	for i := range s.bk {
		b := &s.bk[i]
		var err error
		if s.cfg.Stage < 3 && !s.half() {
			err = model.InitPartWith(s.cfg.Model, s.cfg.Part, in, b.full[:b.Len], b.Offset, b.Offset+b.Len)
		} else {
			err = model.InitPartWith(s.cfg.Model, s.cfg.Part, in, b.p[:b.valid], b.lo, b.lo+b.valid)
		}
		if err != nil {
			return err
		}
	}
	if s.half() {
		s.publish() // the 16-bit weights of every chunk
	}
	return nil
}

// BeginStep zeroes the gradients this rank accumulates into.
func (s *Strategy) BeginStep() error {
	clear(s.g.Data)
	return nil
}

// BeginMicro announces micro-batch k of accum: its backward pass follows
// its forward pass.
func (s *Strategy) BeginMicro(k, accum int) {
	s.micro, s.accum = k, accum
	for i := range s.bk {
		b := &s.bk[i]
		b.left, b.issued = b.Last-b.First+1, false
	}
	s.pred.beginMicro(k, accum)
}

// OptimizerSteps is the number of updates applied.
func (s *Strategy) OptimizerSteps() int { return s.bk[0].opt.Steps() }

// CommStats is the rank's communication over both groups: Busy the total,
// Wait the exposed part.
func (s *Strategy) CommStats() comm.Stats { return s.track.Stats(s.cfg.Grads, s.cfg.Params) }

// Free waits for the collectives still in flight and returns the memory.
func (s *Strategy) Free() {
	s.drain()
	for i := range s.bk {
		b := &s.bk[i]
		if b.ag != nil {
			b.ag.Wait()
			b.ag = nil
		}
		b.staging.Free()
		b.staging = nil
		if b.opt != nil {
			b.opt.Free()
		}
	}
	s.w.Free()
	s.g.Free()
	if s.wh != nil {
		s.freeHalf()
	}
}

// drain waits for every reduction and gather in flight, ignoring errors
// (for Free).
func (s *Strategy) drain() {
	for _, p := range s.inflight {
		p.op.Wait()
		p.tmp.Free()
		p.src.Free()
	}
	s.inflight = nil
	for b, g := range s.res {
		g.op.Wait()
		g.buf.Free()
		delete(s.res, b)
	}
}
