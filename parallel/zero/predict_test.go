package zero

import (
	"testing"

	"trellis/device"
	"trellis/model"
	"trellis/ops"
	pt "trellis/parallel/dptest"
	"trellis/tensor"
)

// recorder is a model.Params that logs Weights calls and feeds them to a
// predictor, checking each prediction against the call that follows.
type recorder struct {
	*model.FlatParams
	pred  predictor
	guess int // the prediction after the previous call
	calls []int
	wrong []int // calls that were not the predicted ones
}

func (r *recorder) Weights(u int) (tensor.Buf, error) {
	if len(r.calls) > 0 && r.guess != u {
		r.wrong = append(r.wrong, len(r.calls))
	}
	r.calls = append(r.calls, u)
	r.guess = r.pred.next(u)
	return r.FlatParams.Weights(u)
}

// The predictor foresees every Weights call of the real model's training
// micro-batches, evaluation passes and sampling, except the first call
// after an update, an evaluation or sampling (where it has no history).
func TestPredictorFollowsTheModel(t *testing.T) {
	cfg := model.Config{Layers: 3, Hidden: 8, Heads: 2, SeqLen: 4, Vocab: 11}
	k, err := ops.New(ops.Config{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	dev := device.New(device.Config{})
	gpt, err := model.New(model.Options{Model: cfg, Kernels: k, Device: dev, MicroBatch: 1})
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
	const accum = 3
	train, eval := pt.WholeOrder(cfg, accum)
	r := &recorder{FlatParams: fp, pred: newPredictor(Order{Train: train, Eval: eval}), guess: -1}
	b := model.Batch{Inputs: make([]int32, 4), Targets: make([]int32, 4)}
	var expectMiss []int // indices of calls with no history
	for step := 0; step < 2; step++ {
		expectMiss = append(expectMiss, len(r.calls))
		r.pred.beginStep()
		for m := 0; m < accum; m++ {
			if _, err := gpt.Forward(r, st, b); err != nil {
				t.Fatal(err)
			}
			if err := gpt.Backward(r, st, 1); err != nil {
				t.Fatal(err)
			}
		}
		if r.guess != -1 {
			t.Errorf("step %d: after the last backward the predictor expects unit %d, want none", step, r.guess)
		}
		r.pred.reset()
		r.guess = -1
		// Evaluation twice, then sampling: each a forward pass.
		expectMiss = append(expectMiss, len(r.calls))
		for e := 0; e < 2; e++ {
			if _, err := gpt.EvalForward(r, st, b); err != nil {
				t.Fatal(err)
			}
		}
		if err := gpt.Logits(r, st, []int32{1, 2}, make([]float32, cfg.Vocab)); err != nil {
			t.Fatal(err)
		}
	}
	if len(r.calls) < 50 {
		t.Fatalf("only %d calls recorded", len(r.calls))
	}
	miss := map[int]bool{}
	for _, i := range expectMiss {
		miss[i] = true
	}
	for _, i := range r.wrong {
		if !miss[i] {
			t.Errorf("call %d (unit %d) was not predicted; calls %v", i, r.calls[i], r.calls)
		}
	}
}
