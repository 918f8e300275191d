package model

import (
	"testing"

	"trellis/device"
)

// TestStageStashes: the stashes of a split model add up to the whole
// model's (the shared boundary residuals counted once per stage), and
// running the whole model stage by stage through them gives Forward's loss
// and Backward's gradients exactly.
func TestStageStashes(t *testing.T) {
	cfg := Config{Layers: 3, Hidden: 16, Heads: 2, SeqLen: 8, Vocab: 32, Dropout: 0.1}
	m, fp, whole, dev := setup(t, cfg, 2, 1)
	if got, want := m.StageStashBytes(0, cfg.Layers, true), m.StashBytes(); got != want {
		t.Fatalf("whole-model stage stash %d bytes, NewStash %d", got, want)
	}
	BTC := m.B * cfg.SeqLen * cfg.Hidden
	tok := int64(8 * m.B * cfg.SeqLen)
	if sum := m.StageStashBytes(0, 1, false) + m.StageStashBytes(1, 3, true); sum != m.StashBytes()+4*int64(BTC)+tok {
		t.Fatalf("stages [0,1) + [1,3) hold %d bytes, want the whole %d + one boundary residual and tokens", sum, m.StashBytes()+4*int64(BTC)+tok)
	}
	b := randomBatch(cfg, 2, 7)
	want, err := m.Forward(fp, whole, b)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Backward(fp, whole, 0.5); err != nil {
		t.Fatal(err)
	}
	wantG := append([]float32(nil), fp.G...)
	fp.ZeroGrads()

	before := dev.Stats().Live[device.Act]
	s0, err := m.NewStageStash(0, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	s1, err := m.NewStageStash(1, 3, true)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := dev.Stats().Live[device.Act]-before, m.StageStashBytes(0, 1, false)+m.StageStashBytes(1, 3, true); got != want {
		t.Fatalf("act grew by %d bytes, want %d", got, want)
	}
	for _, s := range []*Stash{s0, s1} {
		if err := m.Load(s, b); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(m.EmbedForward(fp, s0))
	must(m.BlockForward(fp, s0, 0))
	copy(s1.Residual(1), s0.Residual(1))
	must(m.BlockForward(fp, s1, 1))
	must(m.BlockForward(fp, s1, 2))
	got, err := m.HeadForward(fp, s1)
	must(err)
	if got != want {
		t.Fatalf("stage-by-stage loss %v, whole %v", got, want)
	}
	must(m.HeadBackward(fp, s1, 0.5))
	must(m.BlockBackward(fp, s1, 2))
	must(m.BlockBackward(fp, s1, 1))
	d := append([]float32(nil), m.DResidual()...)
	clear(m.DResidual())
	copy(m.DResidual(), d)
	must(m.BlockBackward(fp, s0, 0))
	must(m.EmbedBackward(fp, s0))
	for i := range wantG {
		if fp.G[i] != wantG[i] {
			t.Fatalf("gradient %d: %v, whole model %v", i, fp.G[i], wantG[i])
		}
	}
	if _, err := m.NewStageStash(1, 2, true); err == nil {
		t.Fatal("a head on a stage that does not end at layer L was accepted")
	}
	s0.Free()
	s1.Free()
}
