package model

import (
	"math"
	"slices"
	"testing"

	"trellis/ops"
)

// Logits for a prefix of length n must equal (after softmax) the training
// forward's probabilities at position n−1: causality, and the (1,n)
// inference shapes.
func TestLogitsMatchForward(t *testing.T) {
	cfg := tiny
	cfg.Dropout = 0.3 // inference and EvalForward must not drop
	m, p, s, _ := setup(t, cfg, 2, 2)
	perturb(p.W, 0.2, 3)
	b := randomBatch(cfg, 2, 4)
	if _, err := m.EvalForward(p, s, b); err != nil {
		t.Fatal(err)
	}
	V := cfg.Vocab
	want := slices.Clone(s.head.probs)
	inf, err := m.NewStash()
	if err != nil {
		t.Fatal(err)
	}
	k, _ := ops.New(ops.Config{Threads: 1})
	logits := make([]float32, V)
	for seq := 0; seq < 2; seq++ {
		for n := 1; n <= cfg.SeqLen; n++ {
			prefix := b.Inputs[seq*cfg.SeqLen : seq*cfg.SeqLen+n]
			if err := m.Logits(p, inf, prefix, logits); err != nil {
				t.Fatal(err)
			}
			ops.SoftmaxForward(k, logits, logits, 1, V)
			row := want[(seq*cfg.SeqLen+n-1)*V:][:V]
			for i := range logits {
				if math.Abs(float64(logits[i]-row[i])) > 1e-6 {
					t.Fatalf("seq %d prefix %d: probability %d = %v, forward %v", seq, n, i, logits[i], row[i])
				}
			}
		}
	}
	if err := m.Logits(p, inf, make([]int32, cfg.SeqLen+1), logits); err == nil {
		t.Error("a prefix longer than seq_len was accepted")
	}
	if err := m.Logits(p, inf, nil, logits); err == nil {
		t.Error("an empty prefix was accepted")
	}
}

// Dropout masks are keyed by (seed, step, site, global position): the same
// batch and step give the same loss, another step another loss, and one
// micro-batch of 2 sequences equals two of 1 with Sample offsets 0 and 1.
func TestDropoutKeys(t *testing.T) {
	cfg := tiny
	cfg.Dropout = 0.3
	m2, p2, s2, _ := setup(t, cfg, 2, 1)
	b := randomBatch(cfg, 2, 5)
	b.Step = 7
	l1, _ := m2.Forward(p2, s2, b)
	l2, _ := m2.Forward(p2, s2, b)
	if l1 != l2 {
		t.Errorf("same step and batch: losses %v and %v", l1, l2)
	}
	losses2 := slices.Clone(s2.Losses())
	b.Step = 8
	if l3, _ := m2.Forward(p2, s2, b); l3 == l1 {
		t.Error("steps 7 and 8 give the same dropout loss")
	}
	e, _ := m2.EvalForward(p2, s2, b)
	if e == l1 {
		t.Error("EvalForward applies dropout")
	}
	b.Step = 7
	m1, p1, s1, _ := setup(t, cfg, 1, 1)
	T := cfg.SeqLen
	for seq := 0; seq < 2; seq++ {
		one := Batch{Inputs: b.Inputs[seq*T : (seq+1)*T], Targets: b.Targets[seq*T : (seq+1)*T], Step: 7, Sample: seq}
		if _, err := m1.Forward(p1, s1, one); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(s1.Losses(), losses2[seq*T:(seq+1)*T]) {
			t.Errorf("sequence %d: per-token losses differ between B=2 and B=1 with Sample=%d", seq, seq)
		}
	}
}
