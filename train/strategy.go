package train

import (
	"trellis/checkpoint"
	"trellis/device"
	"trellis/model"
	"trellis/ops"
	"trellis/optim"
	"trellis/parallel/dp"
	"trellis/parallel/flat"
)

// Strategy owns one rank's parameters, gradients and optimizer state under a
// plan, and is the model.Params its forward and backward passes run on.
// Data parallelism (package parallel/dp) and ZeRO stages 1-3 (package
// parallel/zero) implement it over the data-parallel groups, with an
// optional CommStats() comm.Stats that the run reports; single is the
// one-device reference every plan must match.
//
// A step is: BeginStep; for each micro-batch k of accum: BeginMicro(k,
// accum), forward, backward; FinishGrads; Update.
type Strategy interface {
	model.Params
	// Init writes the initial weights for seed (only the elements this rank
	// holds; every plan gets the same global weights).
	Init(seed uint64) error
	// BeginStep zeroes the gradients for a new optimizer step.
	BeginStep() error
	// BeginMicro announces that the next backward pass is micro-batch k of
	// accum (gradients are reduced only after the last).
	BeginMicro(k, accum int)
	// FinishGrads waits until the step's gradients are reduced.
	FinishGrads() error
	// Update clips the gradients to global norm maxNorm (0: no clipping),
	// applies AdamW with learning rate lr and returns the global gradient
	// norm before clipping.
	Update(lr, maxNorm float64) (float64, error)
	// Shards is this rank's part of the training state, for a checkpoint:
	// parameters under their names, Adam moments under "optim.m."/"optim.v."
	// plus the name. Replicated state is written by one rank only.
	Shards() ([]checkpoint.Shard, error)
	// Restore loads this rank's part of a checkpoint saved under the same
	// plan, and the optimizer step count.
	Restore(c *checkpoint.Checkpoint, optSteps int) error
	// OptimizerSteps is the number of updates applied so far.
	OptimizerSteps() int
	// Free returns the memory to the device.
	Free()
}

// single is the one-device strategy: the whole flat parameter and gradient
// vectors and one AdamW over them.
type single struct {
	*model.FlatParams
	opt    *optim.AdamW
	layout model.Layout
	cfg    model.Config
}

func newSingle(cfg model.Config, dev *device.Device, k *ops.Kernels, hyper optim.Hyper) (*single, error) {
	fp, err := model.NewFlatParams(cfg, dev)
	if err != nil {
		return nil, err
	}
	layout := cfg.Layout()
	opt, err := optim.New(optim.Config{
		Params: fp.W, Grads: fp.G, Decay: optim.Decay2D(OptimTensors(layout)),
		Hyper: hyper, Device: dev, Kernels: k,
	})
	if err != nil {
		fp.Free()
		return nil, err
	}
	return &single{FlatParams: fp, opt: opt, layout: layout, cfg: cfg}, nil
}

// OptimTensors lists the layout's tensors in the form optim.Decay2D takes.
func OptimTensors(l model.Layout) []optim.Tensor {
	var ts []optim.Tensor
	for _, u := range l.Units {
		for _, t := range u.Tensors {
			ts = append(ts, optim.Tensor{Name: t.Name, Off: t.Offset, Shape: t.Shape})
		}
	}
	return ts
}

func (s *single) Init(seed uint64) error { return model.InitRange(s.cfg, seed, s.W, 0, len(s.W)) }

func (s *single) BeginStep() error { s.ZeroGrads(); return nil }

func (s *single) BeginMicro(int, int) {}

func (s *single) FinishGrads() error { return nil }

func (s *single) Update(lr, maxNorm float64) (float64, error) {
	norm := optim.GlobalNorm(s.G)
	s.opt.Step(lr, optim.ClipScale(norm, maxNorm))
	return norm, nil
}

func (s *single) Shards() ([]checkpoint.Shard, error) {
	st := s.opt.State()
	var out []checkpoint.Shard
	for _, prefix := range []struct {
		name string
		buf  []float32
	}{{"", s.W}, {"optim.m.", st.M}, {"optim.v.", st.V}} {
		out = append(out, FlatShards(s.layout, prefix.name, 0, prefix.buf)...)
	}
	return out, nil
}

func (s *single) Restore(c *checkpoint.Checkpoint, optSteps int) error {
	m := make([]float32, len(s.W))
	v := make([]float32, len(s.W))
	for _, t := range []struct {
		prefix string
		dst    []float32
	}{{"", s.W}, {"optim.m.", m}, {"optim.v.", v}} {
		if err := ReadFlat(c, s.layout, t.prefix, 0, t.dst); err != nil {
			return err
		}
	}
	return s.opt.Restore(optim.State{Step: optSteps, M: m, V: v})
}

func (s *single) OptimizerSteps() int { return s.opt.Steps() }

func (s *single) Free() {
	s.opt.Free()
	s.FlatParams.Free()
}

// FlatShards cuts the elements [lo, lo+len(buf)) of the global flat vector
// into per-tensor checkpoint shards named prefix+tensor name, so that a
// checkpoint is indexed by tensor whatever the sharding.
func FlatShards(l model.Layout, prefix string, lo int, buf []float32) []checkpoint.Shard {
	return flat.Shards(dp.Tensors(l), prefix, lo, buf)
}

// ReadFlat fills dst with the global flat elements [lo, lo+len(dst)) of the
// tensors named prefix+name, read from whichever ranks' files hold them.
func ReadFlat(c *checkpoint.Checkpoint, l model.Layout, prefix string, lo int, dst []float32) error {
	return flat.Read(c, dp.Tensors(l), prefix, lo, dst)
}
