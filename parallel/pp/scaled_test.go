package pp

import (
	"math"
	"slices"
	"testing"

	"trellis/comm"
	"trellis/comm/commtest"
	"trellis/comm/local"
	"trellis/device"
	"trellis/ops"
	"trellis/optim"
)

// scaledOutcome is one rank's UpdateScaled: its result and whether its
// weights changed.
type scaledOutcome struct {
	norm    float64
	skipped bool
	changed bool
}

// scaledStep runs UpdateScaled on pp=2 × dp=2 ranks (world rank r is stage
// r%2 of replica r/2) under ZeRO-1, every gradient a small finite value
// except one +Inf on rank bad (-1: none).
func scaledStep(t *testing.T, bad int) []scaledOutcome {
	t.Helper()
	const pp, dp = 2, 2
	world, err := local.New(local.Config{Size: pp * dp})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]scaledOutcome, pp*dp)
	commtest.Ranks(t, world, func(r int, g comm.Group) (err error) {
		out[r], err = scaledRank(g, pp, bad)
		return err
	})
	return out
}

func scaledRank(w comm.Group, pp, bad int) (scaledOutcome, error) {
	r := w.Rank()
	stage, replica := r%pp, r/pp
	var o scaledOutcome
	pipe, err := w.NewGroup("pipe", []int{replica * pp, replica*pp + 1})
	if err != nil {
		return o, err
	}
	dpg, err := w.NewGroup("dp", []int{stage, stage + pp})
	if err != nil {
		return o, err
	}
	tied, err := w.NewGroup("tied", []int{replica * pp, replica*pp + 1})
	if err != nil {
		return o, err
	}
	lay, err := NewLayout(tiny, pp, 1, stage)
	if err != nil {
		return o, err
	}
	k, err := ops.New(ops.Config{Threads: 1})
	if err != nil {
		return o, err
	}
	st, err := NewState(StateConfig{Model: tiny, Units: lay.Units, Device: device.New(device.Config{ID: r}), Kernels: k,
		Hyper: optim.DefaultHyper(), DP: dpg, ZeRO: 1, Pipe: pipe, Tied: tied, OwnsEmbedding: stage == 0})
	if err != nil {
		return o, err
	}
	defer st.Free()
	if err := st.Init(1); err != nil {
		return o, err
	}
	if err := st.BeginStep(); err != nil {
		return o, err
	}
	for i := range st.g.Data[:st.n] {
		st.g.Data[i] = float32(1e-3 * math.Sin(float64(i+r)))
	}
	if r == bad {
		st.g.Data[st.n-1] = float32(math.Inf(1)) // the last held unit: a block or LN_f, never the tied one
	}
	before := slices.Clone(st.w.Data)
	if err := st.FinishGrads(); err != nil {
		return o, err
	}
	o.norm, o.skipped, err = st.UpdateScaled(1e-2, 1, 1.0/1024)
	o.changed = !slices.Equal(before, st.w.Data)
	return o, err
}

// An overflow in one rank's gradients (the second stage of the second
// replica: its element lands in one data-parallel rank's ZeRO-1 chunk)
// makes every rank of the pp × dp mesh skip the step with its weights
// untouched; without it every rank steps, with one norm.
func TestUpdateScaledSkipsOnEveryRank(t *testing.T) {
	for _, o := range scaledStep(t, 3) {
		if !o.skipped || o.changed || !math.IsInf(o.norm, 0) && !math.IsNaN(o.norm) {
			t.Errorf("overflow on rank 3: %+v, want skipped with the weights unchanged and a non-finite norm", o)
		}
	}
	clean := scaledStep(t, -1)
	for r, o := range clean {
		if o.skipped || !o.changed || o.norm != clean[0].norm || !(o.norm > 0) {
			t.Errorf("no overflow: rank %d: %+v, want a step with rank 0's norm %v", r, o, clean[0].norm)
		}
	}
}
