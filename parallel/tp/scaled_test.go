package tp

import (
	"math"
	"slices"
	"sync"
	"testing"

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
		errs := make([]error, tp)
		var wg sync.WaitGroup
		for r := range groups {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, _ := New(groups[r])
				st, err := single.New(single.Config{Model: cfg, Device: device.New(device.Config{}), Hyper: optim.DefaultHyper(),
					Part: c.Part(false), ReduceNorm: c.ReduceNorm})
				if err != nil {
					errs[r] = err
					return
				}
				defer st.Free()
				if errs[r] = st.Init(1); errs[r] != nil {
					return
				}
				for i := range st.G {
					st.G[i] = float32(1e-3 * math.Cos(float64(i)))
				}
				if r == bad {
					st.G[0] = float32(math.Inf(1))
				}
				w0 := slices.Clone(st.W)
				norms[r], skipped[r], errs[r] = st.UpdateScaled(1e-2, 1, 1.0/1024)
				changed[r] = !slices.Equal(w0, st.W)
			}()
		}
		wg.Wait()
		for _, g := range groups {
			g.Close()
		}
		for r := range groups {
			switch {
			case errs[r] != nil:
				t.Fatalf("rank %d: %v", r, errs[r])
			case bad >= 0 && (!skipped[r] || changed[r]):
				t.Errorf("inf on rank %d: rank %d skipped %v, weights changed %v; want skipped, unchanged", bad, r, skipped[r], changed[r])
			case bad < 0 && (skipped[r] || !changed[r] || norms[r] != norms[0]):
				t.Errorf("no inf: rank %d skipped %v, changed %v, norm %v (rank 0 %v)", r, skipped[r], changed[r], norms[r], norms[0])
			}
		}
	}
}
