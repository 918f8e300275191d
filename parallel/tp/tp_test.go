package tp

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"trellis/comm"
	"trellis/comm/commtest"
	"trellis/comm/local"
	"trellis/device"
	"trellis/model"
	"trellis/ops"
	"trellis/precision"
	"trellis/rng"
	"trellis/tensor"
)

// pass is one rank's forward and backward of two micro-batches (the
// gradients accumulate) and what it produced.
type pass struct {
	losses []float32
	g      []float32 // the rank's flat gradient (its PartLayout)
	lay    model.Layout
	gpt    *model.GPT
	logits []float32 // Logits of a prefix
}

// runPart runs part p of cfg on its own device, with c its group's
// points (nil for the single device).
func runPart(t *testing.T, cfg model.Config, p model.Part, c model.TPComm, B int, dt tensor.DType) (pass, error) {
	k, err := ops.New(ops.Config{Threads: 1})
	if err != nil {
		return pass{}, err
	}
	dev := device.New(device.Config{})
	pol := policyOf(dt)
	m, err := model.New(model.Options{Model: cfg, Kernels: k, Device: dev, MicroBatch: B, Seed: 9, Part: p, TP: c, Precision: pol})
	if err != nil {
		return pass{}, err
	}
	fp, err := model.NewPartParams(cfg, p, pol, dev)
	if err != nil {
		return pass{}, err
	}
	if err := model.InitPart(cfg, p, 1, fp.W, 0, len(fp.W)); err != nil {
		return pass{}, err
	}
	perturb(m.Layout(), fp.W)
	fp.Sync(k)
	s, err := m.NewStash()
	if err != nil {
		return pass{}, err
	}
	out := pass{lay: m.Layout(), gpt: m, logits: make([]float32, cfg.Vocab)}
	for micro := 0; micro < 2; micro++ {
		b := batch(cfg, B, uint64(micro))
		b.Step, b.Sample = 3, micro*B
		loss, err := m.Forward(fp, s, b)
		if err != nil {
			return out, err
		}
		if err := m.Backward(fp, s, 0.5); err != nil {
			return out, err
		}
		out.losses = append(out.losses, loss)
	}
	out.g = fp.G
	prefix := batch(cfg, 1, 7).Inputs[:cfg.SeqLen-1]
	return out, m.Logits(fp, s, prefix, out.logits)
}

// policyOf is the precision policy computing in dt.
func policyOf(dt tensor.DType) precision.Policy {
	switch dt {
	case tensor.BF16:
		return precision.BF16()
	case tensor.F16:
		return precision.FP16(1, 1)
	}
	return precision.FP32()
}

// perturb adds noise N(0, 0.1²) keyed by (tensor, global element), the
// same global values under every split, so that biases and LayerNorm
// parameters are not at their initial 0 and 1.
func perturb(lay model.Layout, w []float32) {
	for _, u := range lay.Units {
		for _, tn := range u.Tensors {
			key := rng.Key(5, tn.Name)
			loc := w[tn.Offset : tn.Offset+tn.Size]
			tn.Global.Runs(tn.Valid(), func(l, g, n int) {
				noise := make([]float32, n)
				key.FillNormal(noise, uint64(g), 0, 0.1)
				for i, x := range noise {
					loc[l+i] += x
				}
			})
		}
	}
}

func batch(cfg model.Config, B int, seed uint64) model.Batch {
	r := rand.New(rand.NewPCG(seed, 2))
	n := B * cfg.SeqLen
	b := model.Batch{Inputs: make([]int32, n), Targets: make([]int32, n)}
	for i := range b.Inputs {
		b.Inputs[i], b.Targets[i] = int32(r.IntN(cfg.Vocab)), int32(r.IntN(cfg.Vocab))
	}
	return b
}

// runTP runs the t parts of cfg on goroutine ranks, computing in dt.
func runTP(t *testing.T, cfg model.Config, tp int, sp bool, B int, dt tensor.DType) []pass {
	t.Helper()
	groups, err := local.New(local.Config{Size: tp})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, g := range groups {
			g.Close()
		}
	}()
	out := make([]pass, tp)
	commtest.Ranks(t, groups, func(r int, g comm.Group) (err error) {
		c, _ := New(g)
		out[r], err = runPart(t, cfg, c.Part(sp), c, B, dt)
		return err
	})
	return out
}

// TestPartsMatchOneDevice: tp ∈ {2, 4}, with and without sequence
// parallelism and dropout, on shapes that are not powers of two (and a
// vocabulary that needs padding): every rank's losses within 1e-5 relative
// of the single device's, every gradient element within 1e-5 of the
// single device's gradient of the global element it holds, and the
// inference logits likewise.
func TestPartsMatchOneDevice(t *testing.T) {
	eachPartCase(t, "", func(t *testing.T, cfg model.Config, tp int, sp bool) {
		const B = 3
		ref, err := runPart(t, cfg, model.Part{}, nil, B, tensor.F32)
		if err != nil {
			t.Fatal(err)
		}
		for r, got := range runTP(t, cfg, tp, sp, B, tensor.F32) {
			compare(t, r, cfg, ref, got)
		}
	})
}

// eachPartCase runs f as a subtest (named prefix + the case) for the
// tensor-parallel cases: tp=2 and tp=4 of models whose heads, hidden size
// and vocabulary are not powers of two (37 needs padding), with and
// without sequence parallelism, dropout off and on.
func eachPartCase(t *testing.T, prefix string, f func(t *testing.T, cfg model.Config, tp int, sp bool)) {
	for _, tc := range []struct {
		cfg model.Config
		tp  int
	}{
		{model.Config{Layers: 2, Hidden: 24, Heads: 6, SeqLen: 6, Vocab: 37}, 2},
		{model.Config{Layers: 2, Hidden: 24, Heads: 4, SeqLen: 12, Vocab: 37}, 4},
		// Llama: grouped-query attention (tp = 2 keeps one of the two
		// key/value heads with its 3 query heads; tp = 4 one head of
		// each), SwiGLU widths 20 and 28, the untied and the tied head.
		{model.Config{Arch: "llama", Layers: 2, Hidden: 24, Heads: 6, KVHeads: 2, FFN: 20, SeqLen: 6, Vocab: 37, RopeTheta: 100}, 2},
		{model.Config{Arch: "llama", Layers: 2, Hidden: 32, Heads: 4, FFN: 28, SeqLen: 12, Vocab: 37, TieEmbeddings: true}, 4},
	} {
		for _, sp := range []bool{false, true} {
			for _, drop := range []float64{0, 0.1} {
				cfg := tc.cfg
				cfg.Dropout = drop
				t.Run(fmt.Sprintf("%s%s/tp=%d,sp=%v,dropout=%v", prefix, cfg.ArchName(), tc.tp, sp, drop), func(t *testing.T) { f(t, cfg, tc.tp, sp) })
			}
		}
	}
}

// compare holds one rank's pass to the single device's.
func compare(t *testing.T, r int, cfg model.Config, ref, got pass) {
	t.Helper()
	for i := range ref.losses {
		if e := math.Abs(float64(got.losses[i]-ref.losses[i])) / math.Abs(float64(ref.losses[i])); e > 1e-5 {
			t.Errorf("rank %d micro %d: loss %v, one device %v (rel %.2g)", r, i, got.losses[i], ref.losses[i], e)
		}
	}
	worst := 0.0
	for _, u := range got.lay.Units {
		for _, tn := range u.Tensors {
			g0, _ := ref.lay.Tensor(tn.Name)
			want := ref.g[g0.Offset : g0.Offset+g0.Size]
			loc := got.g[tn.Offset : tn.Offset+tn.Size]
			seen := 0
			tn.Global.Runs(tn.Valid(), func(l, gl, n int) {
				for i := 0; i < n; i++ {
					worst = max(worst, math.Abs(float64(loc[l+i]-want[gl+i])))
				}
				seen += n
			})
			for _, v := range loc[seen:] {
				if v != 0 {
					t.Errorf("rank %d %s: padding gradient %v", r, tn.Name, v)
					break
				}
			}
		}
	}
	t.Logf("rank %d: worst gradient difference %.3g", r, worst)
	if worst > 1e-5 {
		t.Errorf("rank %d: worst gradient difference %.3g > 1e-5", r, worst)
	}
	for i := range ref.logits {
		if d := math.Abs(float64(got.logits[i] - ref.logits[i])); d > 1e-5*max(1, math.Abs(float64(ref.logits[i]))) {
			t.Errorf("rank %d: logit %d = %v, one device %v", r, i, got.logits[i], ref.logits[i])
			break
		}
	}
}
