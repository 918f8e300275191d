package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"trellis/comm/local"
	"trellis/device"
	"trellis/ops"
	"trellis/precision"
)

// cpRanks builds n context-parallel runners of cfg over one local group,
// each with flat whole-model parameters initialised as setupOn's.
func cpRanks(t testing.TB, cfg Config, B, n int, pol precision.Policy, contiguous bool) ([]*GPT, []*FlatParams, []*Stash) {
	t.Helper()
	return cpRanksOn(t, cfg, B, pol, contiguous, local.Config{Size: n})
}

// cpRanksOn is cpRanks over a local group made with lc (a link model).
func cpRanksOn(t testing.TB, cfg Config, B int, pol precision.Policy, contiguous bool, lc local.Config) ([]*GPT, []*FlatParams, []*Stash) {
	t.Helper()
	n := lc.Size
	groups, err := local.New(lc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, g := range groups {
			g.Close()
		}
	})
	ms, ps, ss := make([]*GPT, n), make([]*FlatParams, n), make([]*Stash, n)
	for r := 0; r < n; r++ {
		k, err := ops.New(ops.Config{Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		dev := device.New(device.Config{})
		if ms[r], err = New(Options{Model: cfg, Kernels: k, Device: dev, MicroBatch: B, Seed: 9, Precision: pol, Flash: true,
			CP: groups[r], CPContiguous: contiguous}); err != nil {
			t.Fatal(err)
		}
		if ps[r], err = NewPartParams(cfg, Part{}, pol, dev); err != nil {
			t.Fatal(err)
		}
		if err := InitRange(cfg, 1, ps[r].W, 0, len(ps[r].W)); err != nil {
			t.Fatal(err)
		}
		perturb(ps[r].W, 0.02, 5)
		ps[r].Sync(k)
		if ss[r], err = ms[r].NewStash(); err != nil {
			t.Fatal(err)
		}
	}
	return ms, ps, ss
}

// cpBatch is rank r's share of the (B,T) batch b: its token ranges of
// every sequence.
func cpBatch(t testing.TB, b Batch, T, n, r int) Batch {
	rs, err := CPRanges(T, n, r, false)
	if err != nil {
		t.Fatal(err)
	}
	out := b
	out.Inputs, out.Targets = nil, nil
	for s := 0; s < len(b.Inputs)/T; s++ {
		for _, x := range rs {
			out.Inputs = append(out.Inputs, b.Inputs[s*T+x[0]:s*T+x[1]]...)
			out.Targets = append(out.Targets, b.Targets[s*T+x[0]:s*T+x[1]]...)
		}
	}
	return out
}

// onRanks runs f on every rank at once and fails on the first error.
func onRanks(t testing.TB, n int, f func(r int) error) {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			errs[r] = f(r)
		}(r)
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// A cp group's forward and backward train the single device's model: the
// mean of the ranks' losses is the one device's loss and the mean of
// their gradients its gradient (what the dp×cp reduction averages), with
// dropout on (masks keyed by global position), learned positions (GPT-2)
// and RoPE with grouped-query heads (the Llama), in fp32 and bf16.
func TestCPMatchesOneDevice(t *testing.T) {
	gpt := Config{Layers: 2, Hidden: 16, Heads: 2, SeqLen: 16, Vocab: 32, Dropout: 0.1}
	llama := tinyLlama
	llama.SeqLen, llama.Dropout = 16, 0.1
	for _, cfg := range []Config{gpt, llama} {
		for _, pol := range []precision.Policy{precision.FP32(), precision.BF16()} {
			for _, n := range []int{2, 4} {
				name := fmt.Sprintf("llama=%v/%s/cp=%d", cfg.IsLlama(), pol.Compute, n)
				t.Run(name, func(t *testing.T) { cpMatches(t, cfg, pol, n) })
			}
		}
	}
}

func cpMatches(t *testing.T, cfg Config, pol precision.Policy, n int) {
	const B = 2
	m, p, s, _ := setupOn(t, cfg, B, 1, Options{Precision: pol, Flash: true})
	perturb(p.W, 0.02, 5)
	p.Sync(m.k)
	b := randomBatch(cfg, B, 3)
	b.Step, b.Sample = 4, 6
	p.ZeroGrads()
	want, err := m.Forward(p, s, b)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Backward(p, s, 1); err != nil {
		t.Fatal(err)
	}
	ms, ps, ss := cpRanks(t, cfg, B, n, pol, false)
	losses := make([]float32, n)
	onRanks(t, n, func(r int) error {
		ps[r].ZeroGrads()
		var err error
		if losses[r], err = ms[r].Forward(ps[r], ss[r], cpBatch(t, b, cfg.SeqLen, n, r)); err != nil {
			return err
		}
		return ms[r].Backward(ps[r], ss[r], 1)
	})
	var loss float64
	g := make([]float32, len(p.G))
	for r := 0; r < n; r++ {
		loss += float64(losses[r]) / float64(n)
		for i, x := range ps[r].G {
			g[i] += x / float32(n)
		}
	}
	tol := 1e-5
	if pol.Half() {
		tol = 2e-3 // the 16-bit bound: a different reduction order moves fp32 values across 16-bit roundings
	}
	if d := math.Abs(loss-float64(want)) / math.Abs(float64(want)); d > tol {
		t.Errorf("loss: cp %v, one device %v (relative %.2g > %g)", loss, want, d, tol)
	}
	if e := relErr(g, p.G); e > tol {
		t.Errorf("gradients: relative error %.3g > %g", e, tol)
	} else {
		t.Logf("loss relative %.2g, gradients %.2g", math.Abs(loss-float64(want))/math.Abs(float64(want)), e)
	}
}

// ringOnce runs the ring forward of every rank on its qkv and returns
// L = Σ out⊙R over the ranks, and with back each rank's dL/dqkv.
func ringOnce(t *testing.T, ms []*GPT, qkv, R [][]float32, B int, back bool) (float64, [][]float32) {
	n := len(ms)
	d := ms[0].d
	T := ms[0].T
	X, rows := B*T*d.Cl, B*d.NH*T
	Ls := make([]float64, n)
	dq := make([][]float32, n)
	onRanks(t, n, func(r int) error {
		out, lse := make([]float32, X), make([]float32, rows)
		if err := ms[r].ringForward(out, lse, qkv[r], B); err != nil {
			return err
		}
		for i, o := range out {
			Ls[r] += float64(o) * float64(R[r][i])
		}
		if !back {
			return nil
		}
		dq[r] = make([]float32, len(qkv[r]))
		return ms[r].ringBackward(dq[r], R[r], qkv[r], out, lse, B)
	})
	var L float64
	for _, x := range Ls {
		L += x
	}
	return L, dq
}

// The ring's merged backward is the derivative of its merged forward:
// central differences of L = Σ out⊙R over every rank's qkv, at cp = 2
// and 4, multi-head and grouped-query (two query heads a key/value head).
func TestRingAttentionGradient(t *testing.T) {
	for _, tc := range []struct {
		cfg Config
		n   int
	}{
		{Config{Layers: 1, Hidden: 8, Heads: 2, SeqLen: 8, Vocab: 8}, 2},
		{Config{Arch: "llama", Layers: 1, Hidden: 8, Heads: 4, KVHeads: 2, FFN: 8, SeqLen: 16, Vocab: 8}, 4},
	} {
		const B = 2
		ms, _, _ := cpRanks(t, tc.cfg, B, tc.n, precision.FP32(), false)
		d := ms[0].d
		rnd := rand.New(rand.NewPCG(7, uint64(tc.n)))
		qkv, R := make([][]float32, tc.n), make([][]float32, tc.n)
		for r := range qkv {
			qkv[r] = make([]float32, B*ms[0].T*d.qkvW())
			R[r] = make([]float32, B*ms[0].T*d.Cl)
			for i := range qkv[r] {
				qkv[r][i] = float32(rnd.NormFloat64())
			}
			for i := range R[r] {
				R[r][i] = float32(rnd.NormFloat64())
			}
		}
		_, dq := ringOnce(t, ms, qkv, R, B, true)
		const h = 1e-2
		var worst float64
		for k := 0; k < 40; k++ {
			r, i := rnd.IntN(tc.n), rnd.IntN(len(qkv[0]))
			x := qkv[r][i]
			qkv[r][i] = x + h
			lp, _ := ringOnce(t, ms, qkv, R, B, false)
			qkv[r][i] = x - h
			lm, _ := ringOnce(t, ms, qkv, R, B, false)
			qkv[r][i] = x
			fd := (lp - lm) / (2 * h)
			e := math.Abs(fd-float64(dq[r][i])) / (1e-2 + math.Abs(fd))
			worst = max(worst, e)
			if e > 2e-2 {
				t.Errorf("cp=%d rank %d element %d: backward %v, central difference %v", tc.n, r, i, dq[r][i], fd)
			}
		}
		t.Logf("cp=%d: worst relative gap to central differences %.2g", tc.n, worst)
	}
}

// The load-balanced split gives every rank the same attention work (2·cp+1
// chunk pairs, a diagonal pair half) where the contiguous split gives the
// last rank about twice the average.
func TestCPBalance(t *testing.T) {
	cfg := Config{Layers: 1, Hidden: 8, Heads: 2, SeqLen: 16, Vocab: 8}
	const n, B = 4, 1
	for _, contiguous := range []bool{false, true} {
		ms, ps, ss := cpRanks(t, cfg, B, n, precision.FP32(), contiguous)
		b := randomBatch(cfg, B, 1)
		onRanks(t, n, func(r int) error {
			rs, _ := CPRanges(cfg.SeqLen, n, r, contiguous)
			lb := Batch{}
			for _, x := range rs {
				lb.Inputs = append(lb.Inputs, b.Inputs[x[0]:x[1]]...)
				lb.Targets = append(lb.Targets, b.Targets[x[0]:x[1]]...)
			}
			_, err := ms[r].Forward(ps[r], ss[r], lb)
			return err
		})
		var lo, hi, sum float64 = math.Inf(1), 0, 0
		for _, m := range ms {
			w := m.RingWork().Pairs
			lo, hi, sum = min(lo, w), max(hi, w), sum+w
		}
		imb := hi / (sum / n)
		t.Logf("contiguous=%v: pairs per rank min %v max %v, max/mean %.3f", contiguous, lo, hi, imb)
		if !contiguous && imb != 1 {
			t.Errorf("load-balanced split: max/mean %v, want 1", imb)
		}
		if contiguous && imb < 1.5 {
			t.Errorf("contiguous split: max/mean %v, want about 2", imb)
		}
	}
}

// Sequence lengths that 2·cp does not divide are refused naming the rule.
func TestCPRefusals(t *testing.T) {
	groups, err := local.New(local.Config{Size: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, g := range groups {
			g.Close()
		}
	}()
	k, _ := ops.New(ops.Config{Threads: 1})
	cfg := Config{Layers: 1, Hidden: 8, Heads: 2, SeqLen: 6, Vocab: 8}
	for _, tc := range []struct {
		flash bool
		T     int
		want  string
	}{
		{true, 6, "cp=2: 2·cp=4 does not divide model.seq_len=6"},
	} {
		c := cfg
		c.SeqLen = tc.T
		_, err := New(Options{Model: c, Kernels: k, Device: device.New(device.Config{}), MicroBatch: 1, Flash: tc.flash, CP: groups[0]})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("seq_len=%d flash=%v: error %v, want %q", tc.T, tc.flash, err, tc.want)
		}
	}
}

// Under a 16-bit policy the ring's keys and values travel as 16-bit
// values (half the fp32 bytes), and that changes nothing: the blocks hold
// the stash's rounded values, so the ranks' losses and gradients are bit
// for bit those of the same ranks with an fp32 wire, in bf16 and fp16,
// at cp = 2 and 4, GPT-2 with dropout and a grouped-query Llama.
func TestRingWire16Exact(t *testing.T) {
	gpt := Config{Layers: 2, Hidden: 16, Heads: 2, SeqLen: 16, Vocab: 32, Dropout: 0.1}
	llama := tinyLlama
	llama.SeqLen = 16
	for _, cfg := range []Config{gpt, llama} {
		for _, pol := range []precision.Policy{precision.BF16(), precision.FP16(1024, 100)} {
			for _, n := range []int{2, 4} {
				t.Run(fmt.Sprintf("llama=%v/%s/cp=%d", cfg.IsLlama(), pol.Compute, n), func(t *testing.T) {
					const B = 2
					b := randomBatch(cfg, B, 3)
					run := func(fp32Wire bool) ([]float32, [][]float32) {
						ms, ps, ss := cpRanks(t, cfg, B, n, pol, false)
						losses, grads := make([]float32, n), make([][]float32, n)
						onRanks(t, n, func(r int) error {
							m := ms[r]
							if m.ring.wire[0] == nil {
								return fmt.Errorf("no 16-bit wire under %s", pol.Compute)
							}
							if fp32Wire {
								m.ring.wire[0], m.ring.wire[1] = nil, nil
								m.ring.kv[1] = make([]float32, len(m.ring.kv[0]))
							}
							ps[r].ZeroGrads()
							var err error
							if losses[r], err = m.Forward(ps[r], ss[r], cpBatch(t, b, cfg.SeqLen, n, r)); err != nil {
								return err
							}
							if err := m.Backward(ps[r], ss[r], 1); err != nil {
								return err
							}
							grads[r] = append([]float32(nil), ps[r].G...)
							return nil
						})
						return losses, grads
					}
					l16, g16 := run(false)
					l32, g32 := run(true)
					for r := 0; r < n; r++ {
						if math.Float32bits(l16[r]) != math.Float32bits(l32[r]) {
							t.Errorf("rank %d: loss %v with a 16-bit wire, %v with fp32", r, l16[r], l32[r])
						}
						for i := range g16[r] {
							if math.Float32bits(g16[r][i]) != math.Float32bits(g32[r][i]) {
								t.Errorf("rank %d: gradient %d: %v with a 16-bit wire, %v with fp32", r, i, g16[r][i], g32[r][i])
								break
							}
						}
					}
				})
			}
		}
	}
}

// Ring messages that arrive before their receives are posted are charged
// to the device's comm tag while the transport holds them: with rank 1
// starting its pass late, rank 0's first key/value block waits at rank 1,
// whose comm peak is at least that block and at most the bound train's
// engineBuffers predicts ((2cp−3) blocks and 2cp−2 fp32 sums, at cp=2 in
// fp32 three blocks); once every message is received nothing stays charged.
func TestRingEarlyMessagesCharged(t *testing.T) {
	cfg := Config{Layers: 2, Hidden: 16, Heads: 2, SeqLen: 16, Vocab: 32}
	const B, n = 2, 2
	ms, ps, ss := cpRanks(t, cfg, B, n, precision.FP32(), false)
	b := randomBatch(cfg, B, 3)
	onRanks(t, n, func(r int) error {
		if r == 1 {
			time.Sleep(100 * time.Millisecond)
		}
		ps[r].ZeroGrads()
		if _, err := ms[r].Forward(ps[r], ss[r], cpBatch(t, b, cfg.SeqLen, n, r)); err != nil {
			return err
		}
		return ms[r].Backward(ps[r], ss[r], 1)
	})
	blk := int64(B * cfg.SeqLen / n * 2 * cfg.Hidden * 4)
	st := ms[1].dev.Stats()
	if p := st.Peak[device.Comm]; p < blk || p > 3*blk {
		t.Errorf("rank 1: comm peak %d bytes, want at least one block (%d) and at most three", p, blk)
	}
	for r := range ms {
		if l := ms[r].dev.Stats().Live[device.Comm]; l != 0 || ms[r].ringHeld != 0 {
			t.Errorf("rank %d: %d bytes still charged to comm (%d held) after the passes", r, l, ms[r].ringHeld)
		}
	}
}
