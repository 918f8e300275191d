package pp

import (
	"errors"
	"fmt"
	"math"

	"trellis/checkpoint"
	"trellis/comm"
	"trellis/device"
	"trellis/model"
	"trellis/ops"
	"trellis/optim"
	"trellis/parallel/flat"
)

// StateConfig is everything NewState needs.
type StateConfig struct {
	Model   model.Config
	Units   []int          // the global units this rank holds (Layout.Units)
	Device  *device.Device // param, grad, optim are charged here
	Kernels *ops.Kernels
	Hyper   optim.Hyper
	// DP is the data-parallel group of this stage's replicas (nil: none).
	DP comm.Group
	// ZeRO is 0 (replicated) or 1 (optimizer states sharded over DP).
	ZeRO int
	// Pipe is the pipeline group (nil: pp=1): the gradient norm adds over it.
	Pipe comm.Group
	// Tied joins the first and the last stage (nil on the others, or when
	// one rank is both): the tied embedding's gradient is summed over it.
	Tied comm.Group
	// OwnsEmbedding: this rank runs model stage 0. It alone counts unit 0 in
	// the gradient norm and writes it to checkpoints.
	OwnsEmbedding bool
	// Part is the piece of every held layer this rank computes under tensor
	// parallelism (zero: the whole layers): the held units are those of
	// model.PartLayout(Part), each tensor an N-d box of the global one.
	Part model.Part
	// ReduceNorm sums a squared gradient norm over the tensor-parallel
	// group (nil: none).
	ReduceNorm func(float64) (float64, error)
}

// State is one pipeline rank's share of the training state: the
// parameters, gradients and AdamW moments of the units it holds, in one
// local flat vector (tensors keep their global names, so checkpoints are
// indexed as on one device and any plan reads them). It is the
// model.Params the stage's passes run on, and a parallel.Strategy.
//
// A step's gradients are final after FinishGrads:
//
//	g_0 ← g_0(first stage) + g_0(last stage)         tied embedding, over Tied
//	g   ← (1/N) Σ_dp g                               zero=0: all-reduce over DP
//	g[own chunk] ← (1/N) Σ_dp g[own chunk]           zero=1: reduce-scatter, then
//	                                                 AdamW on the chunk, all-gather w
//
// and the global norm is √(Σ_pipe Σ_dp ‖g_own‖²), unit 0 counted once.
type State struct {
	cfg     StateConfig
	w, g    *device.Buffer // (padded) local weights and gradients
	n       int            // local elements before padding
	lo, len int            // this rank's optimizer chunk [lo, lo+len)
	off     map[int]int    // global unit -> local offset
	size    map[int]int
	ts      []flat.Tensor // every held tensor, local offsets; Copy: another rank writes and counts it
	opt     *optim.AdamW
	dpN     int
	dpR     int
}

// NewState allocates the held units' state.
func NewState(c StateConfig) (*State, error) {
	if c.Device == nil {
		return nil, errors.New("pp: StateConfig.Device is nil")
	}
	if c.ZeRO < 0 || c.ZeRO > 1 {
		return nil, fmt.Errorf("pp: zero=%d with pipeline parallelism: only 0 and 1 are supported (ZeRO-2 would reduce-scatter every micro-batch's gradient and ZeRO-3 gather every chunk's weights once per micro-batch pass, multiplying the data-parallel traffic by the micro-batches; Megatron and DeepSpeed refuse them with pipelines too)", c.ZeRO)
	}
	if err := c.Part.Validate(c.Model); err != nil {
		return nil, fmt.Errorf("pp: %w", err)
	}
	lay, global := c.Model.PartLayout(c.Part), c.Model.Layout()
	s := &State{cfg: c, off: map[int]int{}, size: map[int]int{}, dpN: 1}
	if c.DP != nil {
		s.dpN, s.dpR = c.DP.Size(), c.DP.Rank()
	}
	for _, u := range c.Units {
		if u < 0 || u >= len(lay.Units) {
			return nil, fmt.Errorf("pp: unit %d outside the model's %d units", u, len(lay.Units))
		}
		un := lay.Units[u]
		s.off[u], s.size[u] = s.n, un.Size
		for _, t := range un.Tensors {
			s.ts = append(s.ts, flat.Tensor{Name: t.Name, Offset: s.n + t.Offset - un.Offset, Size: t.Size, Shape: t.Shape,
				Global: t.Global, GlobalShape: t.GlobalShape(global),
				Copy: (t.Replicated && c.Part.Rank != 0) || (u == 0 && !c.OwnsEmbedding)})
		}
		s.n += un.Size
	}
	padded, chunk := s.n, s.n
	if c.ZeRO == 1 {
		chunk = (s.n + s.dpN - 1) / s.dpN
		padded = chunk * s.dpN
		s.lo = s.dpR * chunk
		s.len = max(0, min(chunk, s.n-s.lo))
	} else {
		s.len = s.n
	}
	var err error
	if s.w, err = c.Device.Alloc(device.Param, padded); err != nil {
		return nil, fmt.Errorf("pp: parameters: %w", err)
	}
	if s.g, err = c.Device.Alloc(device.Grad, padded); err != nil {
		s.w.Free()
		return nil, fmt.Errorf("pp: gradients: %w", err)
	}
	var dts []optim.Tensor
	for _, t := range s.ts {
		dts = append(dts, optim.Tensor{Name: t.Name, Off: t.Offset, Shape: t.Shape})
	}
	s.opt, err = optim.New(optim.Config{Params: s.w.Data[s.lo : s.lo+s.len], Grads: s.g.Data[s.lo : s.lo+s.len],
		Offset: s.lo, Decay: optim.Decay2D(dts), Hyper: c.Hyper, Device: c.Device, Kernels: c.Kernels})
	if err != nil {
		s.w.Free()
		s.g.Free()
		return nil, err
	}
	return s, nil
}

func (s *State) span(u int) (int, int, error) {
	o, ok := s.off[u]
	if !ok {
		return 0, 0, fmt.Errorf("pp: unit %d is not held by this pipeline stage (it holds %v)", u, s.cfg.Units)
	}
	return o, o + s.size[u], nil
}

// Weights is unit u's slice of the local weights.
func (s *State) Weights(u int) ([]float32, error) {
	a, b, err := s.span(u)
	if err != nil {
		return nil, err
	}
	return s.w.Data[a:b], nil
}

// ReleaseWeights does nothing: the weights stay resident.
func (s *State) ReleaseWeights(int) {}

// Grads is unit u's slice of the local gradients.
func (s *State) Grads(u int) ([]float32, error) {
	a, b, err := s.span(u)
	if err != nil {
		return nil, err
	}
	return s.g.Data[a:b], nil
}

// GradsDone does nothing: gradients are reduced once, in FinishGrads.
func (s *State) GradsDone(int) error { return nil }

// Init writes the initial weights of the held units, keyed by global
// element index: the same values one device has (padding 0).
func (s *State) Init(seed uint64) error { return s.InitWith(model.Init{Seed: seed}) }

// InitWith is Init from in (a seed or given global weights).
func (s *State) InitWith(in model.Init) error {
	lay := s.cfg.Model.PartLayout(s.cfg.Part)
	for _, u := range s.cfg.Units {
		un := lay.Units[u]
		o := s.off[u]
		if err := model.InitPartWith(s.cfg.Model, s.cfg.Part, in, s.w.Data[o:o+un.Size], un.Offset, un.Offset+un.Size); err != nil {
			return err
		}
	}
	return nil
}

// BeginStep zeroes the gradients.
func (s *State) BeginStep() error { clear(s.g.Data); return nil }

// BeginMicro does nothing: the executor runs the micro-batches.
func (s *State) BeginMicro(int, int) {}

// FinishGrads sums the tied embedding's gradient between the end stages
// and averages over the data-parallel replicas (all-reduce, or
// reduce-scatter under ZeRO-1).
func (s *State) FinishGrads() error {
	if s.cfg.Tied != nil {
		a, b, err := s.span(0)
		if err != nil {
			return err
		}
		if err := comm.AllReduce(s.cfg.Tied, comm.F32(s.g.Data[a:b]), comm.Sum); err != nil {
			return fmt.Errorf("pp: tied embedding gradient: %w", err)
		}
	}
	if s.dpN == 1 {
		return nil
	}
	var err error
	if s.cfg.ZeRO == 0 {
		err = comm.AllReduce(s.cfg.DP, comm.F32(s.g.Data[:s.n]), comm.Avg)
	} else {
		chunk := len(s.g.Data) / s.dpN
		err = comm.ReduceScatter(s.cfg.DP, comm.F32(s.g.Data[s.dpR*chunk:(s.dpR+1)*chunk]), comm.F32(s.g.Data), comm.Avg)
	}
	if err != nil {
		return fmt.Errorf("pp: data-parallel gradient reduction: %w", err)
	}
	return nil
}

// Update clips to global norm maxNorm (0: off), applies AdamW to this
// rank's chunk and, under ZeRO-1, all-gathers the updated weights.
func (s *State) Update(lr, maxNorm float64) (float64, error) {
	norm, err := s.globalNorm()
	if err != nil {
		return 0, err
	}
	s.opt.Step(lr, optim.ClipScale(norm, maxNorm))
	return norm, s.gatherWeights()
}

// gatherWeights all-gathers the updated chunks under ZeRO-1.
func (s *State) gatherWeights() error {
	if s.cfg.ZeRO != 1 || s.dpN == 1 {
		return nil
	}
	chunk := len(s.w.Data) / s.dpN
	own := s.w.Data[s.dpR*chunk : (s.dpR+1)*chunk]
	if err := comm.AllGather(s.cfg.DP, comm.F32(s.w.Data), comm.F32(own)); err != nil {
		return fmt.Errorf("pp: weight all-gather: %w", err)
	}
	return nil
}

// globalNorm adds ‖g‖² over this rank's chunk, each element counted once
// in the world (unit 0 only on the first stage, replicated tensors only on
// tensor-parallel rank 0, no padding), over the DP group under ZeRO-1,
// then over the pipeline, then over the tensor-parallel group. Each
// float64 partial travels as hi = fl32(x), lo = fl32(x − hi).
func (s *State) globalNorm() (float64, error) {
	sq := flat.SumSquares(s.ts, s.lo, s.g.Data[s.lo:s.lo+s.len])
	for _, grp := range []comm.Group{s.dpIfSharded(), s.cfg.Pipe} {
		if grp == nil || grp.Size() == 1 {
			continue
		}
		hi := float32(sq)
		buf := []float32{hi, float32(sq - float64(hi))}
		if err := comm.AllReduce(grp, comm.F32(buf), comm.Sum); err != nil {
			return 0, fmt.Errorf("pp: gradient norm: %w", err)
		}
		sq = float64(buf[0]) + float64(buf[1])
	}
	if s.cfg.ReduceNorm != nil {
		var err error
		if sq, err = s.cfg.ReduceNorm(sq); err != nil {
			return 0, fmt.Errorf("pp: gradient norm: %w", err)
		}
	}
	return math.Sqrt(max(sq, 0)), nil
}

func (s *State) dpIfSharded() comm.Group {
	if s.cfg.ZeRO == 1 {
		return s.cfg.DP
	}
	return nil
}

// Shards is what this rank writes: under ZeRO-0 the first data-parallel
// replica writes its stage's weights and moments; under ZeRO-1 every
// replica writes its chunk. Unit 0 comes from the first stage only, a
// replicated tensor from tensor-parallel rank 0 only, and a split tensor
// is its N-d box of the global one.
func (s *State) Shards() ([]checkpoint.Shard, error) {
	if s.cfg.ZeRO == 0 && s.dpR != 0 {
		return []checkpoint.Shard{}, nil
	}
	st := s.opt.State()
	out := flat.Shards(s.ts, "", s.lo, s.w.Data[s.lo:s.lo+s.len])
	out = append(out, flat.Shards(s.ts, "optim.m.", s.lo, st.M)...)
	return append(out, flat.Shards(s.ts, "optim.v.", s.lo, st.V)...), nil
}

// Restore reads the held weights and this rank's moments from a
// checkpoint written under any plan.
func (s *State) Restore(c *checkpoint.Checkpoint, optSteps int) error {
	if err := flat.Read(c, s.ts, "", 0, s.w.Data[:s.n]); err != nil {
		return err
	}
	m, v := make([]float32, s.len), make([]float32, s.len)
	if err := flat.Read(c, s.ts, "optim.m.", s.lo, m); err != nil {
		return err
	}
	if err := flat.Read(c, s.ts, "optim.v.", s.lo, v); err != nil {
		return err
	}
	return s.opt.Restore(optim.State{Step: optSteps, M: m, V: v})
}

// OptimizerSteps is the number of updates applied.
func (s *State) OptimizerSteps() int { return s.opt.Steps() }

// CommStats sums this rank's data-parallel, tied and pipeline-group traffic.
func (s *State) CommStats() comm.Stats {
	var t comm.Stats
	for _, g := range []comm.Group{s.cfg.DP, s.cfg.Tied, s.cfg.Pipe} {
		if g != nil {
			t = t.Add(g.Stats())
		}
	}
	return t
}

// DPStats is the data-parallel group's part of CommStats (zero without one).
func (s *State) DPStats() comm.Stats {
	if s.cfg.DP == nil {
		return comm.Stats{}
	}
	return s.cfg.DP.Stats()
}

// Free returns the memory.
func (s *State) Free() {
	s.opt.Free()
	s.w.Free()
	s.g.Free()
}
