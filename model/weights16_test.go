package model

import (
	"math"
	"slices"
	"testing"

	"trellis/tensor"
)

// Under bf16 and fp16 the passes compute on the weights' 16-bit
// roundings, all of them (matrices, LayerNorm gains and biases, linear
// biases, embeddings): handing out r(w) instead of w — what ZeRO-1/2's
// 16-bit gather does — gives the same loss and gradients bit for bit; and
// rounding does change them when the weights are not 16-bit values (the
// test would pass vacuously otherwise): an fp32 run on r(w) differs from
// one on w.
func TestHalfWeightsRounded(t *testing.T) {
	cfg := Config{Layers: 2, Hidden: 32, Heads: 4, SeqLen: 16, Vocab: 64, Dropout: 0.1}
	for _, dt := range []tensor.DType{tensor.BF16, tensor.F16} {
		m, p, s, _ := setupHalfOf(t, cfg, 2, 2, dt)
		perturb(p.W, 0.02, 7)
		batch := randomBatch(cfg, 2, 3)
		run := func() (float32, []float32) {
			p.ZeroGrads()
			loss, err := m.Forward(p, s, batch)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Backward(p, s, 1); err != nil {
				t.Fatal(err)
			}
			return loss, slices.Clone(p.G)
		}
		l1, g1 := run()
		r := m.rounder()
		for i, x := range p.W {
			p.W[i] = r(x)
		}
		m.half.base = make([]uintptr, len(m.half.base)) // a fresh fetch rounds again
		l2, g2 := run()
		if l1 != l2 || !slices.Equal(g1, g2) {
			t.Errorf("%s: loss %g on w, %g on r(w) (gradients equal: %v)", dt, l1, l2, slices.Equal(g1, g2))
		}
	}
	mf, pf, sf, _ := setup(t, cfg, 2, 2)
	perturb(pf.W, 0.02, 7)
	batch := randomBatch(cfg, 2, 3)
	a, err := mf.Forward(pf, sf, batch)
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range pf.W {
		pf.W[i] = tensor.ToBF16(x).Float32()
	}
	if b, _ := mf.Forward(pf, sf, batch); a == b {
		t.Errorf("fp32 loss %g on w and on bf16(w): the rounding changes nothing here", a)
	}
}

// Logits (inference) in bf16 and fp16 runs the 16-bit passes on a (1,n)
// pass: the next-token logits of a prefix within 2% (of the largest) of
// the fp32 runner's, and not equal to them.
func TestHalfLogits(t *testing.T) {
	cfg := Config{Layers: 2, Hidden: 32, Heads: 4, SeqLen: 16, Vocab: 64}
	mf, pf, sf, _ := setup(t, cfg, 2, 1)
	perturb(pf.W, 0.02, 7)
	prefix := randomBatch(cfg, 1, 4).Inputs[:11]
	want := make([]float32, cfg.Vocab)
	if err := mf.Logits(pf, sf, prefix, want); err != nil {
		t.Fatal(err)
	}
	var top float64
	for _, x := range want {
		top = max(top, math.Abs(float64(x)))
	}
	for _, dt := range []tensor.DType{tensor.BF16, tensor.F16} {
		m, p, s, _ := setupHalfOf(t, cfg, 2, 1, dt)
		copy(p.W, pf.W)
		got := make([]float32, cfg.Vocab)
		if err := m.Logits(p, s, prefix, got); err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if d := math.Abs(float64(got[i] - want[i])); d > 0.02*top {
				t.Fatalf("%s: logit %d: %g, fp32 %g", dt, i, got[i], want[i])
			}
		}
		if slices.Equal(got, want) {
			t.Errorf("%s: logits equal fp32's bit for bit: the 16-bit path did not run", dt)
		}
	}
}
