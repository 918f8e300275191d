package zero

import (
	"fmt"
	"math"

	"trellis/checkpoint"
	"trellis/comm"
	"trellis/optim"
	"trellis/parallel/flat"
)

// Update clips the gradients to global norm maxNorm and applies AdamW to
// this rank's chunks; under stages 1 and 2 it then issues the all-gather
// of the updated chunks (waited for at each bucket's next use). It
// returns the global norm before clipping:
//
//	‖g‖ = √(Σ_ranks Σ_buckets ‖own chunk‖²)
func (s *Strategy) Update(lr, maxNorm float64) (float64, error) {
	if s.cfg.Stage == 3 {
		if err := s.dropGathered(); err != nil {
			return 0, err
		}
	}
	norm, err := s.globalNorm()
	if err != nil {
		return 0, err
	}
	scale := optim.ClipScale(norm, maxNorm)
	for i := range s.bk {
		s.bk[i].opt.Step(lr, scale)
	}
	s.publish()
	return norm, nil
}

// globalNorm sums the squares of the own gradient chunks and adds the
// partials over the ranks. The float64 partial travels as two float32s,
// hi = fl32(x) and lo = fl32(x − hi), so the conversion loses nothing the
// fp32 sum over ranks keeps.
func (s *Strategy) globalNorm() (float64, error) {
	var sq float64
	var err error
	for i := range s.bk {
		b := &s.bk[i]
		if s.cfg.Part.Split() {
			sq += flat.SumSquares(s.tensors, b.lo, b.g[:b.valid])
		} else {
			sq += optim.SumSquares(b.g[:b.valid])
		}
	}
	if s.n > 1 {
		hi := float32(sq)
		buf := []float32{hi, float32(sq - float64(hi))}
		op := s.track.Watch(s.cfg.Grads.AllReduce(comm.F32(buf), comm.Sum), nil)
		if err := op.Wait(); err != nil {
			return 0, fmt.Errorf("zero: gradient norm: %w", err)
		}
		sq = float64(buf[0]) + float64(buf[1])
	}
	if s.cfg.ReduceNorm != nil {
		if sq, err = s.cfg.ReduceNorm(sq); err != nil {
			return 0, fmt.Errorf("zero: gradient norm: %w", err)
		}
	}
	return math.Sqrt(sq), nil
}

// Shards is this rank's part of the state: the parameters, first and
// second moments of its own chunks (disjoint across ranks; together they
// cover every tensor once).
func (s *Strategy) Shards() ([]checkpoint.Shard, error) {
	var out []checkpoint.Shard
	for i := range s.bk {
		b := &s.bk[i]
		if err := s.waitGather(b); err != nil {
			return nil, err
		}
		st := b.opt.State()
		out = append(out, flat.Shards(s.tensors, "", b.lo, b.p[:b.valid])...)
		out = append(out, flat.Shards(s.tensors, "optim.m.", b.lo, st.M)...)
		out = append(out, flat.Shards(s.tensors, "optim.v.", b.lo, st.V)...)
	}
	return out, nil
}

// Restore loads what this rank holds from a checkpoint written under any
// plan: every weight (stages 1, 2) or its chunks (3, and 1, 2 with Half,
// whose 16-bit weights are then gathered), and the moments of its chunks.
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
		if s.cfg.Stage < 3 && !s.half() {
			err = flat.Read(c, s.tensors, "", b.Offset, b.full[:b.Len])
		} else {
			err = flat.Read(c, s.tensors, "", b.lo, b.p[:b.valid])
		}
		if err != nil {
			return err
		}
		m, v := make([]float32, b.valid), make([]float32, b.valid)
		if err := flat.Read(c, s.tensors, "optim.m.", b.lo, m); err != nil {
			return err
		}
		if err := flat.Read(c, s.tensors, "optim.v.", b.lo, v); err != nil {
			return err
		}
		if err := b.opt.Restore(optim.State{Step: optSteps, M: m, V: v}); err != nil {
			return err
		}
	}
	if s.half() {
		s.publish()
	}
	return nil
}
