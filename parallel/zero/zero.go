// Package zero is the engine's one state strategy: a rank's parameters,
// gradients and optimizer state for the units it holds, replicated or
// sharded over one reduction group — data parallelism and ZeRO
// (Rajbhandari et al. 2020) stages 0 to 3. Every plan runs it: one device
// (a group of one), data parallelism (stage 0), ZeRO 1–3, a tensor-parallel
// rank's part of every unit, a pipeline stage's units, and their
// compositions; expert parallelism runs one more instance over the expert
// tensors and their expert-data-parallel group (train's epState).
//
// The rank's flat parameter vector (its Layout: the units it holds, each
// tensor its tensor-parallel part) is cut into buckets (parallel/flat),
// each padded to a multiple of the group's N ranks and split into N equal
// chunks; rank r owns chunk r of every bucket. With fp32 weights and
// gradients and Adam's two moments, Ψ parameters cost per rank:
//
//	stage 0  replicated                    param 4Ψ    grad 4Ψ    optim 8Ψ
//	stage 1  optimizer states sharded      param 4Ψ    grad 4Ψ    optim 8Ψ/N
//	stage 2  + gradients sharded           param 4Ψ    grad 4Ψ/N  optim 8Ψ/N
//	stage 3  + parameters sharded          param 4Ψ/N  grad 4Ψ/N  optim 8Ψ/N
//
// (stage 0 without padding: its buckets are padded to one rank). Under a
// mixed policy (precision.Policy.Mixed: bf16 or fp16 weights) the layers
// read weights in the Param dtype, which this strategy hands out: stage 0
// keeps fp32 master weights (optim, 4Ψ) and their 16-bit rounding (param,
// 2Ψ), re-rounded after every update; stages 1 and 2 shard the masters
// with the moments (Megatron's distributed optimizer: optim 4Ψ/N) and hold
// every weight in 16-bit (param 2Ψ), gathered in 16-bit after the update;
// stage 3's fp32 chunks are the masters (optim), gathered in fp32 and
// rounded per unit while it is fetched (param, the unit's 2u).
//
// Communication buffers are charged to the tag comm (Shape.Memory bounds
// them):
//
//   - stages 2 and 3: a bucket's full gradient lives from its first
//     Grads(u) until its reduce-scatter completes: the bucket being filled,
//     the one being reduced (at most one reduction in flight — with slow
//     links the backward pass waits rather than piling up full gradients)
//     and the embedding's bucket, which the tied LM head starts at the top
//     of the backward pass and the embedding finishes at its bottom. A
//     bucket's reductions after its first in a step also hold the
//     destination chunk, added into the shard once it lands.
//   - stage 3: the gathered parameters of the bucket in use and of the one
//     prefetched (the next unit in the declared call order, Config.Order),
//     the embedding's kept from the LM head's forward to its backward.
//
// The collectives, per bucket b (chunk c, Avg the mean over the group):
//
//	stage 0  the step's last backward: g_b ← Avg_ranks g_b                       (all-reduce)
//	stage 1  the step's last backward: g_b[r·c:(r+1)·c] ← Avg_ranks …          (reduce-scatter)
//	         after the update: w_b ← all-gather of every rank's chunk
//	stage 2  every backward:  shard_b += Avg_ranks chunk r of this micro-batch's g_b
//	         after the update: the same all-gather as stage 1
//	stage 3  before each use: w_b ← all-gather(shards), freed after use
//	         every backward:  as stage 2
//
// A bucket's backward is complete when GradsDone was called for each of
// its units; stages 0 and 1 reduce on the completion of a step's last
// micro-batch (with Config.Overlap, else in FinishGrads), stages 2 and 3 on
// every completion (Overlap, else once every bucket completed the
// micro-batch). Reduce-scatters go on the gradient group, all-gathers on
// the parameter group (two queues: a prefetch does not wait behind a
// reduction). Tied units (the embedding a pipeline's first and last stages
// both hold) have their gradients summed over Config.Tied before (stages
// 0, 1) or after (stages 2, 3: their shards) the group reduction.
//
// The global gradient norm for clipping is √(Σ over every rank of its
// counted squares): each rank sums the squares of its own chunks (stage 0:
// everything), each tensor it does not count (Config.Copy) left out, and
// one all-reduce per group (the reduction group when sharded, then
// Config.NormGroups in order) adds the partials.
//
// Every rank makes the same decisions from the same sequence of calls, so
// the ranks of a group issue the same collectives in the same order.
package zero

import (
	"errors"
	"fmt"

	"trellis/arch"
	"trellis/comm"
	"trellis/device"
	"trellis/ops"
	"trellis/optim"
	"trellis/parallel/flat"
	"trellis/precision"
)

// Config is everything New needs.
type Config struct {
	// Model is the architecture (its initialisation and whole layout:
	// checkpoints name global tensors and their shapes). Layout is the
	// rank's parameters: its units (a pipeline stage's, or all), each
	// tensor the rank's tensor-parallel part, laid out back to back.
	Model  arch.Config
	Layout arch.Layout
	// Copy says which of the rank's tensors another rank saves and counts
	// in the gradient norm (this rank holds an identical copy: replicated
	// across tensor-parallel ranks, or a tied unit of a later stage); nil:
	// none.
	Copy  func(unit int, t arch.Tensor) bool
	Stage int // 0, 1, 2 or 3
	// Grads carries the gradient reductions and the norm's all-reduce;
	// Params the all-gathers. Both hold the same ranks in the same order
	// (Params may be Grads). The strategy does not close them.
	Grads, Params comm.Group
	// Tied is the group of the ranks that hold identical copies of the
	// units in TiedUnits (nil: none): their gradients are summed over it.
	Tied      comm.Group
	TiedUnits []int
	// NormGroups are the groups over which the partial squared gradient
	// norm is summed after the reduction group (a pipeline's, then the
	// tensor-parallel one), in order.
	NormGroups []comm.Group
	// Stages is the one of NormGroups that holds a pipeline's stages (nil:
	// none): the waits of the norm's sum over it, as of the tied sum, are
	// StageStats's.
	Stages    comm.Group
	Precision precision.Policy
	Device    *device.Device // every allocation is charged here
	Kernels   ops.Backend    // the optimizer's and the roundings' threads
	Hyper     optim.Hyper
	// BucketElems caps a bucket, in elements; 0: one unit per bucket, -1:
	// every unit in one bucket. Breaks are units (global numbers) that
	// start a bucket whatever the cap (a pipeline rank's chunks).
	BucketElems int
	Breaks      []int
	// Overlap reduces each bucket as soon as it is complete; false reduces
	// after the backward pass.
	Overlap bool
	// Prefetch, under stage 3, starts gathering the next unit's bucket as
	// soon as the current one is in hand.
	Prefetch bool
	// Order is the sequence of units a step's passes ask Weights for
	// (Train, the step's micro-batches one after another) and an
	// evaluation pass asks for (Eval): what stage 3 prefetches by.
	Order Order
}

// Order is a rank's call order of Weights (see Config.Order).
type Order struct {
	Train []int // one step: every micro-batch's forward and backward calls, in order
	Eval  []int // one evaluation pass
}

// Validate names the first field that breaks its rule.
func (c Config) Validate() error {
	switch {
	case len(c.Layout.Units) == 0:
		return errors.New("zero: Config.Layout has no units")
	case c.Stage < 0 || c.Stage > 3:
		return fmt.Errorf("zero: stage=%d must be 0, 1, 2 or 3", c.Stage)
	case c.Grads == nil || c.Params == nil:
		return errors.New("zero: Config.Grads and Config.Params must be set")
	case c.Grads.Size() != c.Params.Size() || c.Grads.Rank() != c.Params.Rank():
		return fmt.Errorf("zero: the gradient group (rank %d of %d) and the parameter group (rank %d of %d) differ",
			c.Grads.Rank(), c.Grads.Size(), c.Params.Rank(), c.Params.Size())
	case c.Device == nil:
		return errors.New("zero: Config.Device is nil")
	case c.Kernels == nil:
		return errors.New("zero: Config.Kernels is nil")
	case c.BucketElems < -1:
		return fmt.Errorf("zero: BucketElems=%d must be >= -1", c.BucketElems)
	case (c.Tied == nil) != (len(c.TiedUnits) == 0):
		return errors.New("zero: Config.Tied and Config.TiedUnits go together")
	}
	return c.Precision.Validate()
}

// bucket is one bucket's views and in-flight work on this rank.
type bucket struct {
	flat.Bucket
	lo, valid int       // own chunk = the rank's flat elements [lo, lo+valid), then padding
	full      []float32 // stages 0-2 in fp32: the bucket's full weights (Padded)
	half      []uint16  // Param-dtype weights: the bucket's full 16-bit weights (stages 0-2)
	gfull     []float32 // stages 0, 1: the bucket's full gradients (Padded)
	p         []float32 // own chunk of the fp32 (master) weights (Chunk)
	g         []float32 // own chunk of the gradients (Chunk)
	left      int       // units whose gradient is not final in the bucket's current backward
	done      int       // backward passes completed this step
	reduced   int       // reductions issued this step
	tied      bool      // holds a tied unit
	staging   *device.Buffer
	ag        *flat.Op // stages 1, 2: the updated parameters' all-gather
}

// Strategy is one rank's state; it is the model.Params its passes run on.
type Strategy struct {
	cfg      Config
	tensors  []flat.Tensor
	bl       *flat.Layout
	bk       []bucket
	local    map[int]int // global unit → local unit (flat's numbering)
	n, r     int         // group size and rank
	w, g     *device.Buffer
	wh       *device.Buffer // Param-dtype weights of stages 0-2 (nil in fp32)
	whole    bool           // the rank holds the whole model: norm partials per chunk, not per tensor
	track    flat.Tracker
	stages   flat.Tracker // the waits of the sums over a pipeline's stages (its drain waits there: StageStats)
	accum    int
	inflight []pending // reduce-scatters of stages 2, 3 in issue order
	ops      []*flat.Op
	res      map[int]*gathered
	pred     predictor
	next     int         // the unit expected after the latest Weights call (-1: none)
	gathers  map[int]int // stage 3: all-gathers issued per bucket, over the strategy's life
	units16  map[int]*unit16
	runs     []run // the rank's own elements the optimizer updates
}

// run is a range of the rank's own flat elements [lo, lo+len(p)) and
// the AdamW over it: every bucket's own chunk, or at stage 0 (nothing
// sharded, the buckets contiguous) the whole vector at once.
type run struct {
	lo   int
	p, g []float32
	opt  *optim.AdamW
}

// New allocates the state of cfg.Stage.
func New(cfg Config) (*Strategy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	bl, local, err := buckets(cfg.Layout, cfg.Stage, cfg.Grads.Size(), cfg.BucketElems, cfg.Breaks, cfg.TiedUnits)
	if err != nil {
		return nil, err
	}
	n, r := cfg.Grads.Size(), cfg.Grads.Rank()
	s := &Strategy{cfg: cfg, bl: bl, local: local, n: n, r: r, accum: 1, res: map[int]*gathered{}, next: -1,
		gathers: map[int]int{}, units16: map[int]*unit16{}, whole: wholeModel(cfg.Layout, cfg.Model.Layout())}
	s.pred = newPredictor(cfg.Order)
	s.tensors = flat.TensorsOfLocal(cfg.Layout, cfg.Model.Layout(), func(u int, t arch.Tensor) bool {
		return cfg.Copy != nil && cfg.Copy(u, t)
	})
	if err := s.alloc(); err != nil {
		s.Free()
		return nil, err
	}
	return s, nil
}

// wholeModel says whether lay is the whole model unsplit.
func wholeModel(lay, global arch.Layout) bool {
	if len(lay.Units) != len(global.Units) {
		return false
	}
	for _, u := range lay.Units {
		for _, t := range u.Tensors {
			if t.Replicated || !t.Global.Whole() {
				return false
			}
		}
	}
	return true
}

// mixed says whether the weights handed out are a Param-dtype copy of
// fp32 masters.
func (s *Strategy) mixed() bool { return s.cfg.Precision.Mixed() }

// owner is the rank's chunk index in the buckets (0 for stage 0).
func (s *Strategy) owner() int {
	if s.cfg.Stage == 0 {
		return 0
	}
	return s.r
}

// alloc charges the state (see the package doc).
func (s *Strategy) alloc() error {
	st, pad, N := s.cfg.Stage, s.bl.Padded, s.bl.Ranks
	dev := s.cfg.Device
	// The fp32 weights: full (stages 0-2 in fp32, stage 0 mixed: masters),
	// or the own chunks (stage 3; stages 1, 2 mixed: sharded masters).
	fullW := st == 0 || (st < 3 && !s.mixed())
	wn, wtag := pad/N, device.Param
	if fullW {
		wn = pad
	}
	if s.mixed() {
		wtag = device.Optim // the optimizer's master weights
	}
	var err error
	if s.w, err = dev.Alloc(wtag, wn); err != nil {
		return fmt.Errorf("zero: parameters: %w", err)
	}
	gn := pad
	if st >= 2 {
		gn = pad / N
	}
	if s.g, err = dev.Alloc(device.Grad, gn); err != nil {
		return fmt.Errorf("zero: gradients: %w", err)
	}
	if s.mixed() && st < 3 {
		if s.wh, err = dev.AllocOf(device.Param, s.cfg.Precision.Param, pad); err != nil {
			return fmt.Errorf("zero: %s weights: %w", s.cfg.Precision.Param, err)
		}
	}
	tied := map[int]bool{}
	for _, u := range s.cfg.TiedUnits {
		if i, ok := s.local[u]; ok {
			tied[i] = true
		}
	}
	for _, fb := range s.bl.Buckets {
		b := bucket{Bucket: fb}
		c := fb.Chunk()
		o := s.owner()
		b.lo, b.valid = fb.Shard(o)
		for u := fb.First; u <= fb.Last; u++ {
			b.tied = b.tied || tied[u]
		}
		own := func(whole []float32) []float32 { return whole[o*c : (o+1)*c] }
		if fullW {
			all := s.w.Data[fb.POffset : fb.POffset+fb.Padded]
			b.p = own(all)
			if !s.mixed() {
				b.full = all
			}
		} else {
			b.p = s.w.Data[fb.POffset/N : fb.POffset/N+c]
		}
		if s.wh != nil {
			b.half = s.wh.Bits[fb.POffset : fb.POffset+fb.Padded]
		}
		if st < 2 {
			b.gfull = s.g.Data[fb.POffset : fb.POffset+fb.Padded]
			b.g = own(b.gfull)
		} else {
			b.g = s.g.Data[fb.POffset/N : fb.POffset/N+c]
		}
		s.bk = append(s.bk, b)
	}
	var dts []optim.Tensor
	for _, t := range s.tensors {
		dts = append(dts, optim.Tensor{Name: t.Name, Off: t.Offset, Shape: t.Shape})
	}
	decay := optim.Decay2D(dts)
	if st == 0 {
		s.runs = []run{{lo: 0, p: s.w.Data[:s.bl.Size], g: s.g.Data[:s.bl.Size]}}
	} else {
		for i := range s.bk {
			b := &s.bk[i]
			s.runs = append(s.runs, run{lo: b.lo, p: b.p[:b.valid], g: b.g[:b.valid]})
		}
	}
	for i := range s.runs {
		r := &s.runs[i]
		if r.opt, err = optim.New(optim.Config{Params: r.p, Grads: r.g, Offset: r.lo,
			Decay: decay, Hyper: s.cfg.Hyper, Device: dev, Kernels: s.cfg.Kernels}); err != nil {
			return err
		}
	}
	s.ops = make([]*flat.Op, len(s.bk))
	return nil
}

// Layout is the rank's parameter layout.
func (s *Strategy) Layout() arch.Layout { return s.cfg.Layout }

// OptimizerSteps is the number of updates applied.
func (s *Strategy) OptimizerSteps() int { return s.runs[0].opt.Steps() }

// CommStats is the rank's communication over its groups: Busy the total,
// Wait the exposed part, Bytes the reduction group's (DP) and the tied
// and norm groups' (Other).
func (s *Strategy) CommStats() comm.Stats {
	return s.track.Stats(s.cfg.Grads, s.cfg.Params).Add(s.stages.Stats())
}

// StageStats is the part of CommStats's Wait, Skew and Crowded that the
// sums over a pipeline's stages blocked: the tied units' over Config.Tied
// and the gradient norm's over Config.Stages (zero without either). The
// stages meet there first after the schedule, so that their Skew (the
// wait for other stages that left the cores idle) is the drain's bubble.
func (s *Strategy) StageStats() comm.Stats {
	return s.stages.Stats()
}

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
	}
	for _, r := range s.runs {
		if r.opt != nil {
			r.opt.Free()
		}
	}
	for u, h := range s.units16 {
		h.buf.Free()
		delete(s.units16, u)
	}
	s.w.Free()
	s.g.Free()
	s.wh.Free()
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
	for i, op := range s.ops {
		if op != nil {
			op.Wait()
			s.ops[i] = nil
		}
	}
	for b, g := range s.res {
		g.op.Wait()
		g.buf.Free()
		delete(s.res, b)
	}
}
