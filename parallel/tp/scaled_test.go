package tp

import (
	"math"
	"slices"
	"testing"

	"trellis/comm"
	"trellis/comm/commtest"
	"trellis/comm/local"
	"trellis/device"
	"trellis/model"
	"trellis/optim"
	"trellis/parallel/single"
)

// An inf in one tensor-parallel rank's gradients (rank 1's first wte row,
// a split tensor) makes the global norm of fp16's scaled update
// non-finite on both ranks through ReduceNorm: both skip the step with
// their weights untouched; without it both step, with one norm.
func TestUpdateScaledSkipsOnEveryTPRank(t *testing.T) {
	cfg := model.Config{Layers: 1, Hidden: 8, Heads: 2, SeqLen: 4, Vocab: 13}
	for _, bad := range []int{1, -1} {
		const tp = 2
		groups, err := local.New(local.Config{Size: tp})
		if err != nil {
			t.Fatal(err)
		}
		norms, skipped, changed := make([]float64, tp), make([]bool, tp), make([]bool, tp)
		commtest.Ranks(t, groups, func(r int, g comm.Group) (err error) {
			c, _ := New(g)
			st, err := single.New(single.Config{Model: cfg, Device: device.New(device.Config{}), Hyper: optim.DefaultHyper(),
				Part: c.Part(false), ReduceNorm: c.ReduceNorm})
			if err != nil {
				return err
			}
			defer st.Free()
			if err := st.Init(1); err != nil {
				return err
			}
			for i := range st.G {
				st.G[i] = float32(1e-3 * math.Cos(float64(i)))
			}
			if r == bad {
				st.G[0] = float32(math.Inf(1))
			}
			w0 := slices.Clone(st.W)
			norms[r], skipped[r], err = st.UpdateScaled(1e-2, 1, 1.0/1024)
			changed[r] = !slices.Equal(w0, st.W)
			return err
		})
		for _, g := range groups {
			g.Close()
		}
		for r := range groups {
			switch {
			case bad >= 0 && (!skipped[r] || changed[r]):
				t.Errorf("inf on rank %d: rank %d skipped %v, weights changed %v; want skipped, unchanged", bad, r, skipped[r], changed[r])
			case bad < 0 && (skipped[r] || !changed[r] || norms[r] != norms[0]):
				t.Errorf("no inf: rank %d skipped %v, changed %v, norm %v (rank 0 %v)", r, skipped[r], changed[r], norms[r], norms[0])
			}
		}
	}
}
