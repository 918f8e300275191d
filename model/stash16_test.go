package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"trellis/device"
	"trellis/ops"
	"trellis/precision"
)

// A 16-bit stash: every recomputation (none, selective, full), with and
// without flash, in bf16 and fp16, whole or split backward, gives the
// losses and gradients of no recomputation bit for bit and twice the same; its act peak is
// StashBytes, which is the formula arch's declarations sum to
//
//	4·((L+1)·BTC + layers32 + 2BT + BTV + BT) + 2·(layers16 + BTC) + 8BT
//
// with layers32 = L·(BTC + 4BT + A) (selective: L·(BTC + 4BT) + A; full:
// one layer) and layers16 = L·14·BTC (full: one layer); and the losses
// stay within 1% of fp32's.
func TestHalfStashRecompute(t *testing.T) {
	cfg := Config{Layers: 3, Hidden: 16, Heads: 2, SeqLen: 7, Vocab: 13, Dropout: 0.2}
	B, T, C, L, V := 2, cfg.SeqLen, cfg.Hidden, cfg.Layers, cfg.Vocab
	BT, BTC := B*T, B*T*C
	for _, flash := range []bool{false, true} {
		fpL, _, _, _ := rcRun(t, cfg, Options{Flash: flash}, false)
		A := B * cfg.Heads * T * T
		if flash {
			A = B * cfg.Heads * T
		}
		for _, pol := range []precision.Policy{precision.BF16(), precision.FP16(1, 1)} {
			dt := pol.Compute
			refL, refG, _, _ := rcRun(t, cfg, Options{Flash: flash, Precision: pol}, false)
			for _, rc := range []Recompute{RecomputeNone, RecomputeSelective, RecomputeFull} {
				t.Run(fmt.Sprintf("%s/%v/flash=%v", dt, rc, flash), func(t *testing.T) {
					l, g, act, m := rcRun(t, cfg, Options{Flash: flash, Precision: pol, Recompute: rc}, false)
					if !slices.Equal(l, refL) || !slices.Equal(g, refG) {
						t.Errorf("losses %v, gradients equal %v; without recomputation %v", l, slices.Equal(g, refG), refL)
					}
					layer32, layer16 := BTC+4*BT+A, 14*BTC
					f32, f16 := L*layer32, L*layer16
					switch {
					case rc == RecomputeFull:
						f32, f16 = layer32, layer16
					case rc == RecomputeSelective && !flash:
						f32 = L*(layer32-A) + A
					}
					want := 4*int64((L+1)*BTC+f32+2*BT+BT*V+BT) + 2*int64(f16+BTC) + 8*int64(BT)
					if act != m.StashBytes() || act != want {
						t.Errorf("act peak %d B, StashBytes %d, formula %d", act, m.StashBytes(), want)
					}
					for i, x := range l {
						if d := math.Abs(float64(x-fpL[i])) / float64(fpL[i]); d > 0.01 {
							t.Errorf("micro-batch %d: loss %g, fp32 %g", i, x, fpL[i])
						}
					}
				})
			}
			l2, g2, _, _ := rcRun(t, cfg, Options{Flash: flash, Precision: pol}, false)
			if !slices.Equal(l2, refL) || !slices.Equal(g2, refG) {
				t.Errorf("%s flash=%v: a second run differs", dt, flash)
			}
			// The split backward (zero-bubble schedules: every block's input
			// pass, then every block's weight pass) gives the same bits,
			// under every recomputation.
			for _, rc := range []Recompute{RecomputeNone, RecomputeSelective, RecomputeFull} {
				l3, g3, _, _ := rcRun(t, cfg, Options{Flash: flash, Precision: pol, Recompute: rc}, true)
				if !slices.Equal(l3, refL) || !slices.Equal(g3, refG) {
					t.Errorf("%s flash=%v %v: the split backward differs (gradients equal: %v)", dt, flash, rc, slices.Equal(g3, refG))
				}
			}
		}
	}
}

// A pipeline stage's 16-bit stash: its two buffers are arch's declared
// fp32 and 16-bit counts, charged as StageStashBytes; the whole model
// as one stage with its head (its own or a HeadStash lent to it) runs the
// passes of NewStash bit for bit; a reshape that does not fit the 16-bit
// buffer is refused.
func TestHalfStageStash(t *testing.T) {
	cfg := Config{Layers: 4, Hidden: 16, Heads: 2, SeqLen: 5, Vocab: 11}
	m, p, s, dev := setupHalf(t, cfg, 2, 1)
	batch := randomBatch(cfg, 2, 5)
	pass := func(s *Stash) (float32, []float32) {
		loss, err := m.Forward(p, s, batch)
		if err != nil {
			t.Fatal(err)
		}
		p.ZeroGrads()
		if err := m.Backward(p, s, 1); err != nil {
			t.Fatal(err)
		}
		return loss, slices.Clone(p.G)
	}
	refL, refG := pass(s)
	before := dev.Stats().Live[device.Act]
	st, err := m.NewStageStash(0, cfg.Layers, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := dev.Stats().Live[device.Act] - before; got != m.StageStashBytes(0, cfg.Layers, true) || got != m.StashBytes() {
		t.Errorf("stage stash charged %d B, StageStashBytes %d, StashBytes %d", got, m.StageStashBytes(0, cfg.Layers, true), m.StashBytes())
	}
	if f, h := m.stageElems(0, cfg.Layers, true); len(st.buf.Data) != f || st.halfCap() != h || h == 0 {
		t.Errorf("stage stash holds %d and %d values, want %d and %d", len(st.buf.Data), st.halfCap(), f, h)
	}
	if l, g := pass(st); l != refL || !slices.Equal(g, refG) {
		t.Errorf("stage stash: loss %g, NewStash %g (gradients equal: %v)", l, refL, slices.Equal(g, refG))
	}
	// Blocks [0, L) without the head, and a head stash lent to it.
	if err := m.ReshapeStageStash(st, 0, cfg.Layers, false); err != nil {
		t.Fatal(err)
	}
	before = dev.Stats().Live[device.Act]
	h, err := m.NewHeadStash()
	if err != nil {
		t.Fatal(err)
	}
	if got := dev.Stats().Live[device.Act] - before; got != m.HeadStashBytes() {
		t.Errorf("head stash charged %d B, HeadStashBytes %d", got, m.HeadStashBytes())
	}
	if err := m.AttachHead(st, h); err != nil {
		t.Fatal(err)
	}
	if l, g := pass(st); l != refL || !slices.Equal(g, refG) {
		t.Errorf("stage stash with a head stash: loss %g, NewStash %g", l, refL)
	}
	small, err := m.NewStageStash(0, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.ReshapeStageStash(small, 0, 3, false); err == nil {
		t.Errorf("a one-block stash reshaped to three blocks")
	}
	h.Free()
	st.Free()
	small.Free()
}

// The 16-bit passes run GELU and its gradient in place (out = inp, dinp =
// inp): element-wise kernels, so the same bits as out of place, tails
// included.
func TestGELUInPlace(t *testing.T) {
	k, err := ops.New(ops.Config{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(4, 5))
	const n = 3*1024 + 21
	x, dy := make([]float32, n), make([]float32, n)
	for i := range x {
		x[i], dy[i] = float32(3*r.NormFloat64()), float32(r.NormFloat64())
	}
	out, dx := make([]float32, n), make([]float32, n)
	ops.GELUForward(k, out, x, n)
	ops.GELUBackwardSet(k, dx, x, dy, n)
	y := slices.Clone(x)
	ops.GELUForward(k, y, y, n)
	z := slices.Clone(x)
	ops.GELUBackwardSet(k, z, z, dy, n)
	if !slices.Equal(y, out) || !slices.Equal(z, dx) {
		t.Errorf("GELU in place differs from out of place")
	}
}
