package model

import (
	"fmt"
	"math"
	"sync"
	"testing"

	"trellis/comm"
	"trellis/comm/local"
	"trellis/device"
	"trellis/ops"
	"trellis/precision"
	"trellis/tensor"
)

// groupEP is EPComm over a comm.Group (16-bit rows travel as their bits).
type groupEP struct{ g comm.Group }

func commBuf(b tensor.Buf) comm.Buf {
	if b.DType() == tensor.F32 {
		return comm.F32(b.F32())
	}
	return comm.BF16(tensor.BF16View(b.Bits()))
}

func (e groupEP) ExchangeCounts(dst, src []float32) error {
	return comm.AllToAll(e.g, comm.F32(dst), comm.F32(src))
}

func (e groupEP) AllToAllV(dst, src tensor.Buf, send, recv []int) error {
	return comm.AllToAllV(e.g, commBuf(dst), commBuf(src), send, recv, 41)
}

// epRun is one forward and backward per rank of an expert-parallel group
// of ep ranks, rank q on micro-batch q (dloss 1/ep, the data-parallel
// mean), from the global weights w: every rank's loss and gradients (its
// local layout's).
func epRun(t *testing.T, cfg Config, ep int, pol precision.Policy, w []float32) ([]float32, [][]float32) {
	t.Helper()
	groups, err := local.New(local.Config{Size: ep})
	if err != nil {
		t.Fatal(err)
	}
	losses, grads := make([]float32, ep), make([][]float32, ep)
	errs := make([]error, ep)
	var wg sync.WaitGroup
	for q := range ep {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[q] = func() error {
				k, err := ops.New(ops.Config{Threads: 1})
				if err != nil {
					return err
				}
				dev := device.New(device.Config{})
				part := Part{EP: ep, EPRank: q}
				m, err := New(Options{Model: cfg, Kernels: k, Device: dev, MicroBatch: 2, Seed: 9, Part: part, EP: groupEP{groups[q]},
					Precision: pol, Unpinned: true})
				if err != nil {
					return err
				}
				p, err := NewPartParams(cfg, part, pol, dev)
				if err != nil {
					return err
				}
				if err := InitPartWith(cfg, part, Init{Weights: w}, p.W, 0, len(p.W)); err != nil {
					return err
				}
				p.Sync(k)
				s, err := m.NewStash()
				if err != nil {
					return err
				}
				b := randomBatch(cfg, 2, uint64(q)+3)
				b.Step, b.Sample = 1, 2*q
				if losses[q], err = m.Forward(p, s, b); err != nil {
					return err
				}
				if err := m.Backward(p, s, 1/float32(ep)); err != nil {
					return err
				}
				grads[q] = p.G
				return nil
			}()
		}()
	}
	wg.Wait()
	for q, err := range errs {
		if err != nil {
			t.Fatalf("ep rank %d: %v", q, err)
		}
	}
	return losses, grads
}

// Expert parallelism computes the single device's MoE layer: ep ∈ {2, 4}
// ranks, each on its own micro-batch with E/ep of the experts, give the
// losses of one device running the micro-batches one after another and,
// summed over the ranks (the data-parallel reduction), its dense
// gradients; each rank's experts' gradients are the single device's of
// those experts (their rows from every rank) — capacity below and above
// one (dropped tokens; an expert receiving more than its even share) and
// dropless (the buffers sized for arch's ExpertRows worst case), dropout on, a shared expert and a dense first block, fp32 within 1e-5
// and bf16 within 16-bit rounding.
func TestExpertParallelMatchesOneDevice(t *testing.T) {
	cfg := tinyMoE
	cfg.Layers, cfg.DenseFirst, cfg.SharedExperts, cfg.Dropout = 3, 1, 1, 0.2
	for _, tc := range []struct {
		ep  int
		cf  float64
		pol precision.Policy
		tol float64
	}{{2, 0.75, precision.FP32(), 1e-5}, {4, 1.5, precision.FP32(), 1e-5}, {2, 1.25, precision.BF16(), 2e-2},
		{2, 0, precision.FP32(), 1e-5}, {4, 0, precision.FP32(), 1e-5}, {4, 0, precision.BF16(), 2e-2}} { // 0: dropless
		t.Run(fmt.Sprintf("ep=%d/capacity=%g/%v", tc.ep, tc.cf, tc.pol), func(t *testing.T) {
			c := cfg
			c.CapacityFactor = tc.cf
			m, p, s, _ := setupOn(t, c, 2, 1, Options{Precision: tc.pol})
			perturb(p.W, 0.3, 5)
			p.Sync(m.k)
			w := append([]float32(nil), p.W...)
			var ref []float32
			p.ZeroGrads()
			for q := range tc.ep {
				b := randomBatch(c, 2, uint64(q)+3)
				b.Step, b.Sample = 1, 2*q
				l, err := m.Forward(p, s, b)
				if err != nil {
					t.Fatal(err)
				}
				ref = append(ref, l)
				if err := m.Backward(p, s, 1/float32(tc.ep)); err != nil {
					t.Fatal(err)
				}
			}
			losses, grads := epRun(t, c, tc.ep, tc.pol, w)
			for q := range tc.ep {
				if d := math.Abs(float64(losses[q]-ref[q])) / float64(ref[q]); d > tc.tol/10 {
					t.Errorf("rank %d: loss %.9g, one device %.9g", q, losses[q], ref[q])
				}
			}
			global := c.Layout()
			for _, u := range global.Units {
				for _, tn := range u.Tensors {
					want := p.G[tn.Offset : tn.Offset+tn.Size]
					got := make([]float32, tn.Size)
					for q := range tc.ep {
						lt, _ := c.PartLayout(Part{EP: tc.ep, EPRank: q}).Tensor(tn.Name)
						g := grads[q][lt.Offset : lt.Offset+lt.Size]
						if lt.Global.Whole() { // a dense tensor: the ranks' sum
							for i := range got {
								got[i] += g[i]
							}
							continue
						}
						lt.Global.Runs(lt.Size, func(local, glob, n int) { copy(got[glob:glob+n], g[local:local+n]) })
					}
					var num, den float64
					for i := range want {
						num += float64(got[i]-want[i]) * float64(got[i]-want[i])
						den += float64(want[i]) * float64(want[i])
					}
					if e := math.Sqrt(num / den); !(e <= tc.tol) {
						t.Errorf("%s: gradient relative L2 error %.3g", tn.Name, e)
					}
				}
			}
		})
	}
}
