package pp

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"trellis/comm"
	"trellis/comm/commtest"
	"trellis/comm/local"
	"trellis/device"
	"trellis/model"
	"trellis/ops"
	"trellis/optim"
	"trellis/parallel/zero"
)

var tiny = model.Config{Layers: 5, Hidden: 16, Heads: 2, SeqLen: 8, Vocab: 37, Dropout: 0.1}

// batchOf is micro-batch mb: deterministic random tokens.
func batchOf(cfg model.Config, B, mb int) model.Batch {
	r := rand.New(rand.NewPCG(uint64(mb), 5))
	n := B * cfg.SeqLen
	b := model.Batch{Inputs: make([]int32, n), Targets: make([]int32, n), Step: 3, Sample: mb * B}
	for i := range b.Inputs {
		b.Inputs[i], b.Targets[i] = int32(r.IntN(cfg.Vocab)), int32(r.IntN(cfg.Vocab))
	}
	return b
}

// outcome is one step's global gradient (after the tied sum), its loss,
// and each rank's act peak.
type outcome struct {
	grad []float32
	loss float64
	act  []int64
	sim  Result
	// ahead is each rank's count of W's run ahead of their place.
	ahead []int
}

// runPipeline runs one step of c on goroutine ranks and assembles the
// global gradient from the ranks' units (unit 0 from the first stage).
func runPipeline(t *testing.T, cfg model.Config, c Config) outcome {
	t.Helper()
	return runPipelineOn(t, cfg, c, local.Config{Size: c.PP}, model.Options{})
}

// runPipelineOn is runPipeline on the in-process groups lc makes, the
// runners with mo's Recompute and Compute.
func runPipelineOn(t *testing.T, cfg model.Config, c Config, lc local.Config, mo model.Options) outcome {
	t.Helper()
	const B = 2
	s, err := Build(c)
	if err != nil {
		t.Fatal(err)
	}
	sim, err := Simulate(s, Unit)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := local.New(lc)
	if err != nil {
		t.Fatal(err)
	}
	lay := cfg.Layout()
	out := outcome{grad: make([]float32, lay.Size), act: make([]int64, c.PP), sim: sim, ahead: make([]int, c.PP)}
	var mu sync.Mutex
	commtest.Ranks(t, groups, func(r int, grp comm.Group) error {
		st, loss, dev, ahead, err := runRankWith(grp, cfg, c, s, B, mo)
		if err != nil {
			return err
		}
		defer st.Free()
		mu.Lock()
		defer mu.Unlock()
		out.loss += loss
		out.ahead[r] = ahead
		out.act[r] = dev.Stats().Peak[device.Act]
		for _, u := range st.Layout().Indices() {
			if u == 0 && r != 0 {
				continue
			}
			g, _ := st.Grads(u)
			copy(out.grad[lay.Units[u].Offset:], g)
		}
		return nil
	})
	return out
}

// runRank is one pipeline rank's step: state, link, stage, schedule. It
// returns the state, the loss, the device and the W's the stage ran ahead.
func runRank(world comm.Group, cfg model.Config, c Config, s *Schedule, B int) (*zero.Strategy, float64, *device.Device, int, error) {
	return runRankWith(world, cfg, c, s, B, model.Options{})
}

// runRankWith is runRank with mo's Recompute and Precision: the rank's
// state is parallel/zero's stage 0 over its units, the tied embedding
// summed with the other end of the pipeline, the norm over the pipeline.
func runRankWith(world comm.Group, cfg model.Config, c Config, s *Schedule, B int, mo model.Options) (*zero.Strategy, float64, *device.Device, int, error) {
	r, p := world.Rank(), c.PP
	dev := device.New(device.Config{ID: r})
	k, err := ops.New(ops.Config{Threads: 1})
	if err != nil {
		return nil, 0, nil, 0, err
	}
	lay, err := NewLayoutFor(cfg, c.Kind, p, c.VPP, r)
	if err != nil {
		return nil, 0, nil, 0, err
	}
	ranks := make([]int, p)
	for i := range ranks {
		ranks[i] = i
	}
	var tied comm.Group
	if lay.TiedAcross() {
		if tied, err = world.NewGroup("tied", []int{0, p - 1}); err != nil {
			return nil, 0, nil, 0, err
		}
	}
	one, err := world.NewGroup(fmt.Sprintf("dp%d", r), []int{r})
	if err != nil {
		return nil, 0, nil, 0, err
	}
	train, eval := WeightOrder(s, lay, mo.Recompute == model.RecomputeFull)
	zc := zero.Config{Model: cfg, Layout: cfg.Layout().Select(lay.Units), Grads: one, Params: one, NormGroups: []comm.Group{world},
		Copy: func(u int, _ model.Tensor) bool { return u == 0 && r != 0 }, Precision: mo.Precision, Device: dev, Kernels: k,
		Hyper: optim.DefaultHyper(), BucketElems: -1, Order: zero.Order{Train: train, Eval: eval}}
	if tied != nil {
		zc.Tied, zc.TiedUnits = tied, []int{0}
	}
	st, err := zero.New(zc)
	if err != nil {
		return nil, 0, nil, 0, err
	}
	if err := st.Init(model.Init{Seed: 1}); err != nil {
		return nil, 0, nil, 0, err
	}
	gpt, err := model.New(model.Options{Model: cfg, Kernels: k, Device: dev, MicroBatch: B, Seed: 9, Recompute: mo.Recompute, Precision: mo.Precision})
	if err != nil {
		return nil, 0, nil, 0, err
	}
	link, err := NewLayoutLink(world, "pipe", ranks, lay)
	if err != nil {
		return nil, 0, nil, 0, err
	}
	stage, err := NewStage(StageConfig{GPT: gpt, Params: st, Schedule: s, Layout: lay, Link: link, Device: dev, RunAhead: true})
	if err != nil {
		return nil, 0, nil, 0, err
	}
	defer stage.Free()
	if err := st.BeginStep(c.Micro); err != nil {
		return nil, 0, nil, 0, err
	}
	loss, err := stage.Step(func(mb int) (model.Batch, error) { return batchOf(cfg, B, mb), nil }, float32(1/float64(c.Micro)))
	if err != nil {
		return nil, 0, nil, 0, err
	}
	return st, loss, dev, stage.WeightsAhead(), st.FinishGrads()
}

// reference is one device's gradient and loss sum for the same step.
func reference(t *testing.T, cfg model.Config, m int) ([]float32, float64) {
	const B = 2
	dev := device.New(device.Config{})
	k, _ := ops.New(ops.Config{Threads: 1})
	gpt, err := model.New(model.Options{Model: cfg, Kernels: k, Device: dev, MicroBatch: B, Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	fp, err := model.NewFlatParams(cfg, dev)
	if err != nil {
		t.Fatal(err)
	}
	if err := model.InitRange(cfg, 1, fp.W, 0, len(fp.W)); err != nil {
		t.Fatal(err)
	}
	st, _ := gpt.NewStash()
	var sum float64
	for mb := 0; mb < m; mb++ {
		loss, err := gpt.Forward(fp, st, batchOf(cfg, B, mb))
		if err != nil {
			t.Fatal(err)
		}
		if err := gpt.Backward(fp, st, float32(1/float64(m))); err != nil {
			t.Fatal(err)
		}
		sum += float64(loss)
	}
	return fp.G, sum
}

// Every schedule, executed, gives one device's loss and gradient (relative
// L2 1e-6: only the tied embedding's two halves add in another order), and
// zb-h1's split backward gives 1F1B's gradient bit for bit. Each rank's act
// peak is the simulated stashes in flight per chunk, plus zb-h1's weight
// stashes between B and W.
func TestExecutorMatchesOneDevice(t *testing.T) {
	const m = 4
	want, wantLoss := reference(t, tiny, m)
	got := map[string]outcome{}
	for _, c := range []Config{
		{Kind: GPipe, PP: 2, Micro: m}, {Kind: OneFOneB, PP: 4, Micro: m}, {Kind: OneFOneB, PP: 2, Micro: m},
		{Kind: Interleaved, PP: 2, VPP: 2, Micro: m}, {Kind: ZBH1, PP: 4, Micro: m}, {Kind: ZBH1, PP: 2, Micro: m},
	} {
		name := fmt.Sprintf("%s/pp%d", c.Kind, c.PP)
		t.Run(name, func(t *testing.T) {
			o := runPipeline(t, tiny, c)
			got[name] = o
			if math.Abs(o.loss-wantLoss) > 1e-6*wantLoss {
				t.Errorf("loss sum %.9g, one device %.9g", o.loss, wantLoss)
			}
			if e := relL2(o.grad, want); !(e < 1e-6) {
				t.Errorf("gradient relative L2 error %.3g", e)
			}
			checkAct(t, tiny, c, o)
		})
	}
	for _, p := range []int{2, 4} {
		a, b := got[fmt.Sprintf("1f1b/pp%d", p)], got[fmt.Sprintf("zb-h1/pp%d", p)]
		for i := range a.grad {
			if math.Float32bits(a.grad[i]) != math.Float32bits(b.grad[i]) {
				t.Fatalf("pp=%d: zb-h1 gradient %d = %v, 1f1b %v", p, i, b.grad[i], a.grad[i])
			}
		}
	}
}

// checkAct holds the ranks' act peaks to the simulated counts: the
// micro-batches in flight over all the rank's chunks, each in a stash of
// its largest chunk; on the last rank the head stashes between F and B (m
// for GPipe, else 1); and zb-h1's weight stashes between B and W.
func checkAct(t *testing.T, cfg model.Config, c Config, o outcome) {
	t.Helper()
	dev := device.New(device.Config{})
	k, _ := ops.New(ops.Config{Threads: 1})
	gpt, err := model.New(model.Options{Model: cfg, Kernels: k, Device: dev, MicroBatch: 2})
	if err != nil {
		t.Fatal(err)
	}
	for r := 0; r < c.PP; r++ {
		lay, _ := NewLayoutFor(cfg, c.Kind, c.PP, c.VPP, r)
		blocks, heads := 0, 0
		var want int64
		for ch := 0; ch < lay.VPP; ch++ {
			b, _, last := lay.Chunk(ch)
			blocks = max(blocks, b[1]-b[0])
			if last {
				heads = 1
				if c.Kind == GPipe {
					heads = c.Micro
				}
			}
			want += int64(o.sim.Deferred[r][ch]) * int64(gpt.WeightStashFloats(b[0], b[1])) * 4
		}
		want += int64(o.sim.InFlight[r])*gpt.StageStashBytes(0, blocks, false) + int64(heads)*gpt.HeadStashBytes()
		if o.act[r] != want {
			t.Errorf("rank %d: act peak %d, want %d (in flight %v, deferred %v)", r, o.act[r], want, o.sim.InFlight[r], o.sim.Deferred[r])
		}
	}
}

func relL2(a, b []float32) float64 {
	var d2, b2 float64
	for i := range b {
		d := float64(a[i]) - float64(b[i])
		d2 += d * d
		b2 += float64(b[i]) * float64(b[i])
	}
	return math.Sqrt(d2 / b2)
}

// A stage whose neighbour never answers fails within the timeout with an
// error that names the neighbour's rank and the action it waited at.
func TestDeadStageIsNamed(t *testing.T) {
	c := Config{Kind: OneFOneB, PP: 2, Micro: 2}
	s, err := Build(c)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := local.New(local.Config{Size: 2, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer groups[0].Close()
	// Rank 1 makes its groups (NewGroup needs no communication) and dies.
	if _, err := NewP2PLink(groups[1], "pipe", []int{0, 1}, 1, 1); err != nil {
		t.Fatal(err)
	}
	_, _, _, _, err = runRank(groups[0], tiny, c, s, 2)
	if err == nil || !errors.Is(err, comm.ErrPeer) || !strings.Contains(err.Error(), "rank 1") || !strings.Contains(err.Error(), "pp: rank 0") {
		t.Fatalf("error %v, want a peer error naming rank 1", err)
	}
}
