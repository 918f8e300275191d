package tp

import (
	"fmt"
	"sync"
	"testing"

	"trellis/comm/local"
	"trellis/device"
	"trellis/model"
	"trellis/ops"
	"trellis/precision"
)

// layerBytes runs one forward and backward pass on rank r of a group and
// returns the payload bytes block 0 passed to the group in each.
func layerBytes(c *Comm, cfg model.Config, sp bool, B int) (fwd, bwd int64, err error) {
	k, err := ops.New(ops.Config{Threads: 1})
	if err != nil {
		return 0, 0, err
	}
	dev := device.New(device.Config{})
	p := c.Part(sp)
	m, err := model.New(model.Options{Model: cfg, Kernels: k, Device: dev, MicroBatch: B, Part: p, TP: c})
	if err != nil {
		return 0, 0, err
	}
	fp, err := model.NewPartParams(cfg, p, precision.FP32(), dev)
	if err != nil {
		return 0, 0, err
	}
	if err := model.InitPart(cfg, p, 1, fp.W, 0, len(fp.W)); err != nil {
		return 0, 0, err
	}
	s, err := m.NewStash()
	if err != nil {
		return 0, 0, err
	}
	bytes := func() int64 { return c.Stats().Bytes }
	measure := func(fn func() error) (int64, error) {
		b0 := bytes()
		err := fn()
		return bytes() - b0, err
	}
	steps := []func() error{
		func() error { return m.Load(s, batch(cfg, B, 1)) },
		func() error { return m.EmbedForward(fp, s) },
		func() error {
			var e error
			fwd, e = measure(func() error { return m.BlockForward(fp, s, 0) })
			return e
		},
		func() error { _, e := m.HeadForward(fp, s); return e },
		func() error { return m.HeadBackward(fp, s, 1) },
		func() error {
			var e error
			bwd, e = measure(func() error { return m.BlockBackward(fp, s, 0) })
			return e
		},
	}
	for _, st := range steps {
		if err := st(); err != nil {
			return 0, 0, err
		}
	}
	return fwd, bwd, nil
}

// TestLayerCommBytes holds the payload bytes of one block to the formula
// in the package comment, n = B·T·C fp32 values: without SP 2 all-reduces
// of n forward and 2 backward (8n bytes each way); with SP 2 all-gathers
// and 2 reduce-scatters of n forward (16n bytes: a ring moves the same
// wire bytes as the two all-reduces, an all-reduce being a reduce-scatter
// followed by an all-gather), and backward 2 all-gathers of the branch
// gradients, 2 re-gathers of the LayerNorm outputs, 2 reduce-scatters of
// n and 2 all-reduces of 2C (24n + 16C bytes).
func TestLayerCommBytes(t *testing.T) {
	cfg := model.Config{Layers: 2, Hidden: 24, Heads: 4, SeqLen: 12, Vocab: 37}
	const B = 3
	n := int64(B * cfg.SeqLen * cfg.Hidden)
	for _, tc := range []struct {
		tp       int
		sp       bool
		fwd, bwd int64
	}{
		{2, false, 8 * n, 8 * n},
		{4, false, 8 * n, 8 * n},
		{2, true, 16 * n, 24*n + 16*int64(cfg.Hidden)},
		{4, true, 16 * n, 24*n + 16*int64(cfg.Hidden)},
	} {
		t.Run(fmt.Sprintf("tp=%d,sp=%v", tc.tp, tc.sp), func(t *testing.T) {
			groups, err := local.New(local.Config{Size: tc.tp})
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			fwd, bwd, errs := make([]int64, tc.tp), make([]int64, tc.tp), make([]error, tc.tp)
			for r := range groups {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, _ := New(groups[r])
					fwd[r], bwd[r], errs[r] = layerBytes(c, cfg, tc.sp, B)
				}()
			}
			wg.Wait()
			for r := range groups {
				groups[r].Close()
				if errs[r] != nil {
					t.Fatalf("rank %d: %v", r, errs[r])
				}
				if fwd[r] != tc.fwd || bwd[r] != tc.bwd {
					t.Errorf("rank %d: block bytes forward %d, backward %d; formula %d, %d", r, fwd[r], bwd[r], tc.fwd, tc.bwd)
				}
			}
		})
	}
}
