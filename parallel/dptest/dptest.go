// Package dptest runs short training jobs on goroutine ranks for the
// tests of the state strategy (parallel/zero) and holds the single-device
// reference every plan must match.
package dptest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"trellis/checkpoint"
	"trellis/comm"
	"trellis/comm/local"
	"trellis/device"
	"trellis/model"
	"trellis/ops"
	"trellis/optim"
	"trellis/parallel"
)

// Tiny has an odd vocabulary so that buckets need padding.
var Tiny = model.Config{Layers: 2, Hidden: 16, Heads: 2, SeqLen: 8, Vocab: 37}

// Strategy is what the harness drives.
type Strategy = parallel.Strategy

// Job is a short training run: steps of a global batch of `global`
// sequences, micro-batches of mb, on ranks built by build.
type Job struct {
	Model  model.Config
	Ranks  int
	MB     int
	Global int
	Steps  int
	Clip   float64
	// Recompute is the model's activation recomputation.
	Recompute model.Recompute
}

// Outcome is what a run produced: per-step mean loss and norm, and the
// final global parameters and moments assembled from every rank's shards.
type Outcome struct {
	Losses, Norms []float64
	W, M, V       []float32
	Devs          []*device.Device
}

// Hyper is the optimizer of every run.
var Hyper = optim.Hyper{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}

// sequence i of step s: deterministic random tokens.
func sequence(cfg model.Config, s, i int, in, tgt []int32) {
	r := rand.New(rand.NewPCG(uint64(s), uint64(i)))
	for j := range in {
		in[j], tgt[j] = int32(r.IntN(cfg.Vocab)), int32(r.IntN(cfg.Vocab))
	}
}

// Run trains j on j.Ranks goroutine ranks; build makes rank r's strategy
// from its world group and device.
func (j Job) Run(t testing.TB, build Builder) Outcome {
	t.Helper()
	groups, err := local.New(local.Config{Size: j.Ranks})
	if err != nil {
		t.Fatal(err)
	}
	out := Outcome{Losses: make([]float64, j.Steps), Norms: make([]float64, j.Steps), Devs: make([]*device.Device, j.Ranks)}
	shards := make([][]checkpoint.Shard, j.Ranks)
	errs := make([]error, j.Ranks)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for r := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dev := device.New(device.Config{ID: r})
			out.Devs[r] = dev
			losses, norms, sh, err := j.rank(groups[r], dev, build)
			mu.Lock()
			defer mu.Unlock()
			errs[r], shards[r] = err, sh
			for s := range losses {
				out.Losses[s] += losses[s] / float64(j.Ranks)
				if r == 0 {
					out.Norms[s] = norms[s]
				}
			}
			if err != nil {
				for _, g := range groups {
					g.Close()
				}
			}
		}()
	}
	wg.Wait()
	for _, g := range groups {
		g.Close()
	}
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	out.W, out.M, out.V = Assemble(t, j.Model, shards)
	return out
}

// rank runs one rank's steps and returns its losses, norms and final shards.
func (j Job) rank(world comm.Group, dev *device.Device, build Builder) ([]float64, []float64, []checkpoint.Shard, error) {
	k, err := ops.New(ops.Config{Threads: 1})
	if err != nil {
		return nil, nil, nil, err
	}
	accum := j.Global / (j.Ranks * j.MB)
	st, err := build(world, dev, k, accum)
	if err != nil {
		return nil, nil, nil, err
	}
	defer st.Free()
	gpt, err := model.New(model.Options{Model: j.Model, Kernels: k, Device: dev, MicroBatch: j.MB, Seed: 5, Recompute: j.Recompute})
	if err != nil {
		return nil, nil, nil, err
	}
	stash, err := gpt.NewStash()
	if err != nil {
		return nil, nil, nil, err
	}
	if err := st.Init(model.Init{Seed: 7}); err != nil {
		return nil, nil, nil, err
	}
	n := j.MB * j.Model.SeqLen
	in, tgt := make([]int32, n), make([]int32, n)
	var losses, norms []float64
	for s := 0; s < j.Steps; s++ {
		if err := st.BeginStep(accum); err != nil {
			return nil, nil, nil, err
		}
		var sum float64
		for m := 0; m < accum; m++ {
			first := (m*j.Ranks + world.Rank()) * j.MB
			for q := 0; q < j.MB; q++ {
				T := j.Model.SeqLen
				sequence(j.Model, s, first+q, in[q*T:(q+1)*T], tgt[q*T:(q+1)*T])
			}
			loss, err := gpt.Forward(st, stash, model.Batch{Inputs: in, Targets: tgt, Step: int64(s), Sample: first})
			if err != nil {
				return nil, nil, nil, err
			}
			if err := gpt.Backward(st, stash, float32(1/float64(accum))); err != nil {
				return nil, nil, nil, err
			}
			sum += float64(loss)
		}
		if err := st.FinishGrads(); err != nil {
			return nil, nil, nil, err
		}
		u, err := st.Update(parallel.Update{LR: 1e-2 * float64(s+1), Clip: j.Clip})
		if err != nil {
			return nil, nil, nil, err
		}
		norm := u.Norm
		// An evaluation pass between steps, as the trainer does.
		if _, err := gpt.EvalForward(st, stash, model.Batch{Inputs: in, Targets: tgt}); err != nil {
			return nil, nil, nil, err
		}
		losses, norms = append(losses, sum/float64(accum)), append(norms, norm)
	}
	sh, err := st.Shards()
	return losses, norms, sh, err
}

// Assemble builds the global flat parameters and moments from every rank's
// shards, failing unless they cover each element exactly once.
func Assemble(t testing.TB, cfg model.Config, shards [][]checkpoint.Shard) (w, m, v []float32) {
	t.Helper()
	lay := cfg.Layout()
	out := map[string][]float32{"": make([]float32, lay.Size), "optim.m.": make([]float32, lay.Size), "optim.v.": make([]float32, lay.Size)}
	cover := map[string][]int{}
	for k := range out {
		cover[k] = make([]int, lay.Size)
	}
	for _, rs := range shards {
		for _, sh := range rs {
			prefix, name := "", sh.Name
			for _, p := range []string{"optim.m.", "optim.v."} {
				if len(name) > len(p) && name[:len(p)] == p {
					prefix, name = p, name[len(p):]
				}
			}
			tn, ok := lay.Tensor(name)
			if !ok {
				t.Fatalf("shard of unknown tensor %q", sh.Name)
			}
			vals, err := sh.Float32()
			if err != nil {
				t.Fatal(err)
			}
			for i, x := range vals {
				at := tn.Offset + int(sh.Lo) + i
				out[prefix][at] = x
				cover[prefix][at]++
			}
		}
	}
	for k, c := range cover {
		for i, n := range c {
			if n != 1 {
				t.Fatalf("element %d of %q is held by %d ranks' shards, want 1", i, k, n)
			}
		}
	}
	return out[""], out["optim.m."], out["optim.v."]
}

// Builder makes a rank's strategy from its world group, device and
// kernels, for steps of accum micro-batches.
type Builder func(world comm.Group, dev *device.Device, k ops.Backend, accum int) (Strategy, error)

// WholeOrder is the call order of Weights of a step of accum micro-batches
// on the whole model (train, for parallel/zero's Config.Order), and of an
// evaluation pass (eval).
func WholeOrder(cfg model.Config, accum int) (train, eval []int) {
	fwd, bwd := cfg.WeightOrder()
	for range accum {
		train = append(append(train, fwd...), bwd...)
	}
	return train, fwd
}

// Groups makes this rank's gradient and parameter groups over the whole
// world, as package train does along the dp axis.
func Groups(world comm.Group) (grads, params comm.Group, err error) {
	ranks := make([]int, world.Size())
	for i := range ranks {
		ranks[i] = i
	}
	if grads, err = world.NewGroup("grad", ranks); err != nil {
		return nil, nil, err
	}
	params, err = world.NewGroup("param", ranks)
	return grads, params, err
}

// CloseTo checks got against want in the relative L2 norm:
// ‖got−want‖₂ ≤ tol·‖want‖₂. (Not elementwise: the gradient of the
// attention's key bias is exactly 0 in exact arithmetic — softmax ignores
// a shift shared by a row of scores — so in fp32 it is rounding noise that
// differs between reduction orders, and Adam, which divides by the
// gradient's own scale (+ε), turns that noise into O(lr·noise/ε) updates.)
func CloseTo(got, want []float32, tol float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("length %d, want %d", len(got), len(want))
	}
	var d2, w2 float64
	for i := range want {
		d := float64(got[i]) - float64(want[i])
		d2 += d * d
		w2 += float64(want[i]) * float64(want[i])
	}
	if rel := math.Sqrt(d2 / w2); !(rel <= tol) {
		return fmt.Errorf("relative L2 error %.3g > %g", rel, tol)
	}
	return nil
}
