package zero

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"trellis/comm"
	"trellis/comm/commtest"
	"trellis/comm/local"
	"trellis/device"
	"trellis/model"
	"trellis/ops"
	"trellis/optim"
	"trellis/parallel"
	pt "trellis/parallel/dptest"
)

// scaledOutcome is one rank's loss-scaled update: its result and whether
// its weights changed.
type scaledOutcome struct {
	norm    float64
	skipped bool
	changed bool
}

// scaledStep runs a loss-scaled update (1/S = 1/1024) on a pp=2 × dp=2
// mesh (world rank r is stage r%2 of replica r/2) under the given ZeRO
// stage, the tied embedding summed between the stages and the norm over
// the pipeline, every gradient a small finite value except one +Inf on
// rank bad (-1: none).
func scaledStep(t *testing.T, stage, bad int) []scaledOutcome {
	t.Helper()
	const pp, dp = 2, 2
	world, err := local.New(local.Config{Size: pp * dp})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]scaledOutcome, pp*dp)
	commtest.Ranks(t, world, func(r int, g comm.Group) (err error) {
		out[r], err = scaledRank(g, stage, pp, bad)
		return err
	})
	return out
}

func scaledRank(w comm.Group, stage, pp, bad int) (scaledOutcome, error) {
	r := w.Rank()
	st, replica := r%pp, r/pp
	var o scaledOutcome
	pipe, err := w.NewGroup("pipe", []int{replica * pp, replica*pp + 1})
	if err != nil {
		return o, err
	}
	dpg, err := w.NewGroup("dp", []int{st, st + pp})
	if err != nil {
		return o, err
	}
	tied, err := w.NewGroup("tied", []int{replica * pp, replica*pp + 1})
	if err != nil {
		return o, err
	}
	cfg := pt.Tiny
	units := []int{0, 1, 2}
	if st == 1 {
		units = []int{0, 3}
	}
	k, _ := ops.New(ops.Config{Threads: 1})
	s, err := New(Config{Model: cfg, Layout: cfg.Layout().Select(units), Copy: func(u int, _ model.Tensor) bool { return u == 0 && st != 0 },
		Stage: stage, Grads: dpg, Params: dpg, Tied: tied, TiedUnits: []int{0}, NormGroups: []comm.Group{pipe},
		Device: device.New(device.Config{ID: r}), Kernels: k, Hyper: optim.DefaultHyper(), BucketElems: -1})
	if err != nil {
		return o, err
	}
	defer s.Free()
	if err := s.Init(model.Init{Seed: 1}); err != nil {
		return o, err
	}
	if err := s.BeginStep(1); err != nil {
		return o, err
	}
	last := units[len(units)-1] // a block or LN_f, never the tied unit
	for _, u := range units {
		g, err := s.Grads(u)
		if err != nil {
			return o, err
		}
		for i := range g {
			g[i] = float32(1e-3 * math.Sin(float64(i+r)))
		}
		if r == bad && u == last {
			g[len(g)-1] = float32(math.Inf(1))
		}
		if err := s.GradsDone(u); err != nil {
			return o, err
		}
	}
	before := slices.Clone(s.w.Data)
	if err := s.FinishGrads(); err != nil {
		return o, err
	}
	u, err := s.Update(parallel.Update{LR: 1e-2, Clip: 1, InvScale: 1.0 / 1024})
	o.norm, o.skipped = u.Norm, u.Skipped
	o.changed = !slices.Equal(before, s.w.Data)
	return o, err
}

// Under every stage, an overflow in one rank's gradients (the second
// stage of the second replica) makes every rank of the pp × dp mesh skip
// the step with its weights untouched (the norm's sums over the
// data-parallel group and the pipeline carry the inf everywhere); without
// it every rank steps, with one norm.
func TestUpdateScaledSkipsOnEveryRank(t *testing.T) {
	for stage := 0; stage <= 3; stage++ {
		t.Run(fmt.Sprintf("stage%d", stage), func(t *testing.T) {
			for _, o := range scaledStep(t, stage, 3) {
				if !o.skipped || o.changed || !math.IsInf(o.norm, 0) && !math.IsNaN(o.norm) {
					t.Errorf("overflow on rank 3: %+v, want skipped with the weights unchanged and a non-finite norm", o)
				}
			}
			clean := scaledStep(t, stage, -1)
			for r, o := range clean {
				if o.skipped || !o.changed || o.norm != clean[0].norm || !(o.norm > 0) {
					t.Errorf("no overflow: rank %d: %+v, want a step with rank 0's norm %v", r, o, clean[0].norm)
				}
			}
		})
	}
}
