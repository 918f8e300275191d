package zero

import (
	"fmt"
	"slices"
	"testing"

	"trellis/comm"
	"trellis/device"
	"trellis/model"
	"trellis/ops"
	pt "trellis/parallel/dptest"
)

// Under recomputation the model asks Params for the same units in the
// same order as without (the recomputed forward of block l runs inside
// its backward's Weights hold), so the predictor foresees the same calls.
func TestPredictorUnderRecompute(t *testing.T) {
	cfg := model.Config{Layers: 3, Hidden: 8, Heads: 2, SeqLen: 4, Vocab: 11, Dropout: 0.1}
	var ref *recorder
	for _, rc := range []model.Recompute{model.RecomputeNone, model.RecomputeSelective, model.RecomputeFull} {
		k, err := ops.New(ops.Config{Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		dev := device.New(device.Config{})
		gpt, err := model.New(model.Options{Model: cfg, Kernels: k, Device: dev, MicroBatch: 1, Recompute: rc})
		if err != nil {
			t.Fatal(err)
		}
		st, err := gpt.NewStash()
		if err != nil {
			t.Fatal(err)
		}
		fp, err := model.NewFlatParams(cfg, dev)
		if err != nil {
			t.Fatal(err)
		}
		train, eval := pt.WholeOrder(cfg, 2)
		r := &recorder{FlatParams: fp, pred: newPredictor(Order{Train: train, Eval: eval}), guess: -1}
		b := model.Batch{Inputs: make([]int32, 4), Targets: make([]int32, 4)}
		r.pred.beginStep()
		for range 2 {
			if _, err := gpt.Forward(r, st, b); err != nil {
				t.Fatal(err)
			}
			if err := gpt.Backward(r, st, 1); err != nil {
				t.Fatal(err)
			}
		}
		if ref == nil {
			ref = r
			continue
		}
		if !slices.Equal(r.calls, ref.calls) || !slices.Equal(r.wrong, ref.wrong) {
			t.Errorf("%v: calls %v (unpredicted %v), without recomputation %v (%v)", rc, r.calls, r.wrong, ref.calls, ref.wrong)
		}
	}
}

// ZeRO-3 with recomputation trains bit-identically to no recomputation
// and all-gathers every block exactly twice per micro-batch (its forward;
// its backward with the recomputed forward inside) plus once per step for
// the harness's evaluation pass, every unit as often as without
// recomputation.
func TestRecomputeGathersUnderStage3(t *testing.T) {
	cfg := pt.Tiny
	cfg.Layers, cfg.Dropout = 3, 0.1
	j := pt.Job{Model: cfg, Ranks: 2, MB: 1, Global: 4, Steps: 3}
	micro := j.Steps * j.Global / (j.Ranks * j.MB)
	var refLoss []float64
	var refCounts []int
	for _, rc := range []model.Recompute{model.RecomputeNone, model.RecomputeSelective, model.RecomputeFull} {
		t.Run(fmt.Sprint(rc), func(t *testing.T) {
			c := Config{Model: cfg, Stage: 3, Prefetch: true, Overlap: true}
			var rank0 *Strategy
			build := func(world comm.Group, dev *device.Device, k ops.Backend, accum int) (pt.Strategy, error) {
				st, err := build(c)(world, dev, k, accum)
				if s, ok := st.(*Strategy); ok && world.Rank() == 0 {
					rank0 = s
				}
				return st, err
			}
			j.Recompute = rc
			out := j.Run(t, build)
			var counts []int
			for u := 0; u < cfg.Layers+2; u++ {
				counts = append(counts, rank0.gathers[rank0.bl.Of(u)])
			}
			for l := 1; l <= cfg.Layers; l++ {
				if want := 2*micro + j.Steps; counts[l] != want {
					t.Errorf("block unit %d gathered %d times over %d micro-batches and %d evaluations, want %d", l, counts[l], micro, j.Steps, want)
				}
			}
			if refCounts == nil {
				refLoss, refCounts = out.Losses, counts
				return
			}
			if !slices.Equal(counts, refCounts) {
				t.Errorf("gathers per unit %v, without recomputation %v", counts, refCounts)
			}
			if !slices.Equal(out.Losses, refLoss) {
				t.Errorf("losses %v, without recomputation %v", out.Losses, refLoss)
			}
		})
	}
}
