package zero

import (
	"fmt"
	"math"

	"trellis/checkpoint"
	"trellis/comm"
	"trellis/model"
	"trellis/optim"
	"trellis/parallel"
	"trellis/parallel/flat"
	"trellis/tensor"
)

var _ parallel.Strategy = (*Strategy)(nil)

// fullWeights says whether the rank holds every fp32 weight of its layout
// (stage 0; stages 1, 2 in fp32), else only its chunks.
func (s *Strategy) fullWeights() bool {
	return s.cfg.Stage == 0 || (s.cfg.Stage < 3 && !s.mixed())
}

// Init writes the initial weights of what this rank holds (every weight,
// or its chunks), the values a single device has, from a seed or given
// global weights; under a mixed policy their rounding follows.
func (s *Strategy) Init(in model.Init) error {
	for i := range s.bk {
		b := &s.bk[i]
		var err error
		if s.fullWeights() {
			all := s.w.Data[b.POffset : b.POffset+b.Len]
			err = model.InitLocal(s.cfg.Model, s.cfg.Layout, in, all, b.Offset)
		} else {
			err = model.InitLocal(s.cfg.Model, s.cfg.Layout, in, b.p[:b.valid], b.lo)
		}
		if err != nil {
			return err
		}
	}
	s.publish()
	return nil
}

// Update clips, applies AdamW to this rank's chunks and publishes the
// weights (see parallel.Strategy). The global norm is
//
//	‖g‖ = √(Σ over the groups of every rank's Σ_own chunks ‖g_counted‖²)
func (s *Strategy) Update(u parallel.Update) (parallel.Updated, error) {
	sq, err := s.SquaredNorm()
	if err != nil {
		return parallel.Updated{}, err
	}
	return s.Apply(u, math.Sqrt(sq))
}

// SquaredNorm is ‖g‖² of Update: Σ over the groups of every rank's
// counted squares, the same on every rank. A rank whose parameters are
// split between several strategies (expert parallelism: the experts'
// own instance) adds their squares and applies every one with the same
// norm (Apply).
func (s *Strategy) SquaredNorm() (float64, error) {
	return s.globalSquares()
}

// Apply clips with the global gradient norm n (the norm before
// clipping, of g rather than S·g under loss scaling), applies AdamW to
// this rank's chunks and publishes the weights: Update's second half.
func (s *Strategy) Apply(u parallel.Update, n float64) (parallel.Updated, error) {
	if s.cfg.Stage == 3 {
		if err := s.dropGathered(); err != nil {
			return parallel.Updated{}, err
		}
	}
	var out parallel.Updated
	scale := 0.0
	if u.InvScale > 0 {
		var skip bool
		if out.Norm, scale, skip = optim.ScaledClip(n, u.Clip, u.InvScale); skip {
			out.Skipped = true
			return out, nil
		}
	} else {
		out.Norm, scale = n, optim.ClipScale(n, u.Clip)
	}
	for _, r := range s.runs {
		r.opt.Step(u.LR, scale)
	}
	s.publish()
	return out, nil
}

// publish makes the updated weights usable: under a mixed policy stage 0
// rounds its masters into the Param-dtype copy; stages 1 and 2 start the
// all-gather of the updated chunks (waited for at each bucket's next
// use) — fp32, or their roundings under a mixed policy (the bits travel
// as a bf16 payload: an all-gather does no arithmetic).
func (s *Strategy) publish() {
	switch {
	case s.cfg.Stage == 3:
		return
	case s.cfg.Stage == 0:
		if s.mixed() {
			s.cfg.Kernels.Encode(s.wh.Buf(), s.w.Data)
		}
		return
	}
	for i := range s.bk {
		b := &s.bk[i]
		if !s.mixed() {
			b.ag = s.track.Watch(s.cfg.Params.AllGather(comm.F32(b.full), comm.F32(b.p)), nil)
			continue
		}
		c := b.Chunk()
		own := s.wh.Buf().Slice(b.POffset+s.r*c, b.POffset+(s.r+1)*c)
		s.cfg.Kernels.Encode(own, b.p)
		b.ag = s.track.Watch(s.cfg.Params.AllGather(comm.BF16(tensor.BF16View(b.half)), comm.BF16(tensor.BF16View(own.Bits()))), nil)
	}
}

// globalSquares sums the squares of the own counted gradients and adds the
// partials over the groups. A rank that holds the whole model sums each
// chunk at once; one with a part of it, each tensor's share (its copies
// and padding left out). Each float64 partial travels as two float32s,
// hi = fl32(x) and lo = fl32(x − hi), so the conversion loses nothing the
// fp32 sum over ranks keeps.
func (s *Strategy) globalSquares() (float64, error) {
	var sq float64
	sum := func(lo int, g []float32) float64 {
		if s.whole {
			return optim.SumSquares(g)
		}
		return flat.SumSquares(s.tensors, lo, g)
	}
	if s.cfg.Stage == 0 {
		sq = sum(0, s.g.Data[:s.bl.Size])
	} else {
		for i := range s.bk {
			b := &s.bk[i]
			sq += sum(b.lo, b.g[:b.valid])
		}
	}
	groups := s.cfg.NormGroups
	if s.cfg.Stage > 0 && s.n > 1 {
		groups = append([]comm.Group{s.cfg.Grads}, groups...)
	}
	for _, g := range groups {
		if g == nil || g.Size() == 1 {
			continue
		}
		hi := float32(sq)
		buf := []float32{hi, float32(sq - float64(hi))}
		track := &s.track
		if g == s.cfg.Stages {
			track = &s.stages
		}
		op := track.Watch(g.AllReduce(comm.F32(buf), comm.Sum), nil)
		if err := op.Wait(); err != nil {
			return 0, fmt.Errorf("zero: gradient norm: %w", err)
		}
		sq = float64(buf[0]) + float64(buf[1])
	}
	return sq, nil
}

// Shards is this rank's part of the state: the fp32 (master) weights and
// the two moments of its own chunks (stage 0: everything, written by the
// group's first rank alone); copies are left to the rank that counts them.
func (s *Strategy) Shards() ([]checkpoint.Shard, error) {
	if s.cfg.Stage == 0 && s.r != 0 {
		return []checkpoint.Shard{}, nil
	}
	for i := range s.bk {
		if err := s.waitGather(&s.bk[i]); err != nil {
			return nil, err
		}
	}
	out := []checkpoint.Shard{}
	for _, r := range s.runs {
		st := r.opt.State()
		out = append(out, flat.Shards(s.tensors, "", r.lo, r.p)...)
		out = append(out, flat.Shards(s.tensors, "optim.m.", r.lo, st.M)...)
		out = append(out, flat.Shards(s.tensors, "optim.v.", r.lo, st.V)...)
	}
	return out, nil
}

// Restore loads what this rank holds from a checkpoint written under any
// plan: every weight or its chunks, and the moments of its chunks; the
// weights are then published as after an update.
func (s *Strategy) Restore(c *checkpoint.Checkpoint, optSteps int) error {
	if err := s.dropGathered(); err != nil {
		return err
	}
	for i := range s.bk {
		b := &s.bk[i]
		if err := s.waitGather(b); err != nil {
			return err
		}
		var err error
		if s.fullWeights() {
			err = flat.Read(c, s.tensors, "", b.Offset, s.w.Data[b.POffset:b.POffset+b.Len])
		} else {
			err = flat.Read(c, s.tensors, "", b.lo, b.p[:b.valid])
		}
		if err != nil {
			return err
		}
	}
	for _, r := range s.runs {
		m, v := make([]float32, len(r.p)), make([]float32, len(r.p))
		if err := flat.Read(c, s.tensors, "optim.m.", r.lo, m); err != nil {
			return err
		}
		if err := flat.Read(c, s.tensors, "optim.v.", r.lo, v); err != nil {
			return err
		}
		if err := r.opt.Restore(optim.State{Step: optSteps, M: m, V: v}); err != nil {
			return err
		}
	}
	if s.mixed() {
		s.publish()
	}
	return nil
}
