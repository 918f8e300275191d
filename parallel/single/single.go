// Package single is the one-device strategy: the whole flat parameter and
// gradient vectors of the model (model.FlatParams) and one AdamW over them.
// It is what `trellis train` runs for dp=1,zero=0, and the reference every
// parallel plan is tested against.
package single

import (
	"fmt"
	"math"

	"trellis/checkpoint"
	"trellis/device"
	"trellis/model"
	"trellis/ops"
	"trellis/optim"
	"trellis/parallel/flat"
)

// Config is everything New needs.
type Config struct {
	Model   model.Config
	Device  *device.Device // param, grad and optim are charged here
	Kernels *ops.Kernels   // the optimizer's threads (nil: inline)
	Hyper   optim.Hyper
	Decay   []optim.Range // flat ranges that get weight decay; nil: DecayPart(Model, Part)
	// Part is the piece of the model this rank holds under tensor
	// parallelism (zero: the whole model).
	Part model.Part
	// ReduceNorm adds the partial squared gradient norms of the other
	// ranks that hold other parts (nil: none); see flat.SumSquares.
	ReduceNorm func(sq float64) (float64, error)
}

// Strategy holds one device's whole training state.
type Strategy struct {
	*model.FlatParams
	opt *optim.AdamW
	cfg model.Config
	c   Config
	ts  []flat.Tensor
}

// New allocates the weights, gradients (model.FlatParams) and Adam moments.
func New(c Config) (*Strategy, error) {
	if c.Device == nil {
		return nil, fmt.Errorf("single: Config.Device is nil")
	}
	fp, err := model.NewPartParams(c.Model, c.Part, c.Device)
	if err != nil {
		return nil, err
	}
	decay := c.Decay
	if decay == nil {
		decay = DecayPart(c.Model, c.Part)
	}
	opt, err := optim.New(optim.Config{Params: fp.W, Grads: fp.G, Decay: decay, Hyper: c.Hyper, Device: c.Device, Kernels: c.Kernels})
	if err != nil {
		fp.Free()
		return nil, err
	}
	return &Strategy{FlatParams: fp, opt: opt, cfg: c.Model, c: c, ts: flat.TensorsOfPart(c.Model, c.Part)}, nil
}

// Init writes the initial weights for seed.
func (s *Strategy) Init(seed uint64) error { return s.InitWith(model.Init{Seed: seed}) }

// InitWith writes the initial weights from in (a seed or given weights).
func (s *Strategy) InitWith(in model.Init) error {
	return model.InitPartWith(s.cfg, s.c.Part, in, s.W, 0, len(s.W))
}

// BeginStep zeroes the gradients.
func (s *Strategy) BeginStep() error { s.ZeroGrads(); return nil }

// BeginMicro does nothing: gradients accumulate in place.
func (s *Strategy) BeginMicro(int, int) {}

// FinishGrads does nothing: there is nothing to reduce.
func (s *Strategy) FinishGrads() error { return nil }

// Update clips to the global norm maxNorm (0: off) and applies AdamW.
func (s *Strategy) Update(lr, maxNorm float64) (float64, error) {
	norm, err := s.norm()
	if err != nil {
		return 0, err
	}
	s.opt.Step(lr, optim.ClipScale(norm, maxNorm))
	return norm, nil
}

// norm is the global gradient norm: ‖G‖, or with other parts on other
// ranks √(ReduceNorm(Σ of the squares this rank counts)).
func (s *Strategy) norm() (float64, error) {
	if s.c.ReduceNorm == nil && !s.c.Part.Split() {
		return optim.GlobalNorm(s.G), nil
	}
	sq := flat.SumSquares(s.ts, 0, s.G)
	if s.c.ReduceNorm != nil {
		var err error
		if sq, err = s.c.ReduceNorm(sq); err != nil {
			return 0, fmt.Errorf("single: gradient norm: %w", err)
		}
	}
	return math.Sqrt(sq), nil
}

// Shards is the whole state under per-tensor names: the weights, and the
// Adam moments prefixed "optim.m." and "optim.v.".
func (s *Strategy) Shards() ([]checkpoint.Shard, error) {
	st := s.opt.State()
	out := flat.Shards(s.ts, "", 0, s.W)
	out = append(out, flat.Shards(s.ts, "optim.m.", 0, st.M)...)
	return append(out, flat.Shards(s.ts, "optim.v.", 0, st.V)...), nil
}

// Restore loads the weights and moments of a checkpoint and the
// optimizer's step count.
func (s *Strategy) Restore(c *checkpoint.Checkpoint, optSteps int) error {
	m := make([]float32, len(s.W))
	v := make([]float32, len(s.W))
	for _, t := range []struct {
		prefix string
		dst    []float32
	}{{"", s.W}, {"optim.m.", m}, {"optim.v.", v}} {
		if err := flat.Read(c, s.ts, t.prefix, 0, t.dst); err != nil {
			return err
		}
	}
	return s.opt.Restore(optim.State{Step: optSteps, M: m, V: v})
}

// OptimizerSteps is the number of updates applied so far.
func (s *Strategy) OptimizerSteps() int { return s.opt.Steps() }

// Free returns the memory to the device.
func (s *Strategy) Free() {
	s.opt.Free()
	s.FlatParams.Free()
}

// Decay is the GPT-2 rule for cfg (optim.Decay2D): matrices and
// embeddings get weight decay, biases and LayerNorm parameters do not.
func Decay(cfg model.Config) []optim.Range { return DecayPart(cfg, model.Part{}) }

// DecayPart is Decay over the flat vector of part p (model.PartLayout).
func DecayPart(cfg model.Config, p model.Part) []optim.Range {
	var ts []optim.Tensor
	for _, u := range cfg.PartLayout(p).Units {
		for _, t := range u.Tensors {
			ts = append(ts, optim.Tensor{Name: t.Name, Off: t.Offset, Shape: t.Shape})
		}
	}
	return optim.Decay2D(ts)
}
