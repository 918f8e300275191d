package model

import (
	"errors"
	"strings"
	"testing"

	"trellis/device"
	"trellis/ops"
)

// Every byte of a stash and of the scratch is charged to the device under
// its tag, and freeing returns it.
func TestStashAccounting(t *testing.T) {
	cfg := Config{Layers: 2, Hidden: 16, Heads: 4, SeqLen: 8, Vocab: 20}
	const B = 3
	m, p, s, dev := setup(t, cfg, B, 1)
	st := dev.Stats()
	BT, BTC := B*8, B*8*16
	// Per stash, by hand: residuals (L+1)·BTC; per layer ln1, atty, res2, ln2
	// (4 BTC), qkv 3 BTC, fc and GELU(fc) 8 BTC, four (B,T) statistics,
	// attention B·NH·T²; final LN BTC + 2 BT; probabilities BTV; losses BT;
	// tokens 2·BT int32.
	want := 4 * int64(3*BTC+2*(15*BTC+4*BT+B*4*8*8)+BTC+2*BT+BT*20+BT+2*BT)
	if m.StashBytes() != want {
		t.Errorf("StashBytes = %d, want %d", m.StashBytes(), want)
	}
	if st.Live[device.Act] != want {
		t.Errorf("act bytes %d, want one stash = %d", st.Live[device.Act], want)
	}
	if st.Live[device.Workspace] != m.WorkspaceBytes() || m.WorkspaceBytes() == 0 {
		t.Errorf("workspace bytes %d, model reports %d", st.Live[device.Workspace], m.WorkspaceBytes())
	}
	if n := int64(cfg.NumParams()) * 4; st.Live[device.Param] != n || st.Live[device.Grad] != n {
		t.Errorf("param/grad bytes %d/%d, want %d each", st.Live[device.Param], st.Live[device.Grad], n)
	}
	s2, err := m.NewStash()
	if err != nil {
		t.Fatal(err)
	}
	if got := dev.Stats().Live[device.Act]; got != 2*want {
		t.Errorf("two stashes: act bytes %d, want %d", got, 2*want)
	}
	// Two stashes in flight hold independent micro-batches.
	b1, b2 := randomBatch(cfg, B, 1), randomBatch(cfg, B, 2)
	l1, err := m.Forward(p, s, b1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Forward(p, s2, b2); err != nil {
		t.Fatal(err)
	}
	p.ZeroGrads()
	if err := m.Backward(p, s, 1); err != nil {
		t.Fatal(err)
	}
	g1 := append([]float32(nil), p.G...)
	_, p2, s3, _ := setup(t, cfg, B, 1)
	if l, _ := m.Forward(p2, s3, b1); l != l1 {
		t.Errorf("loss %v with one stash, %v with another in flight", l, l1)
	}
	if err := m.Backward(p2, s3, 1); err != nil {
		t.Fatal(err)
	}
	for i := range g1 {
		if g1[i] != p2.G[i] {
			t.Fatalf("gradient %d differs when another micro-batch is in flight", i)
		}
	}
	s.Free()
	s2.Free()
	s.Free() // a second Free is a no-op
	if got := dev.Stats().Live[device.Act]; got != 0 {
		t.Errorf("act bytes after Free: %d", got)
	}
	if _, err := m.Forward(p, s, b1); err == nil {
		t.Error("Forward on a freed stash succeeded")
	}
	m.Free()
	p.Free()
	if st := dev.Stats(); st.LiveTotal != 0 {
		t.Errorf("bytes live after freeing everything: %+v", st.Live)
	}
}

func TestStashOutOfMemory(t *testing.T) {
	cfg := Config{Layers: 2, Hidden: 16, Heads: 4, SeqLen: 8, Vocab: 20}
	k, _ := ops.New(ops.Config{Threads: 1})
	probe := device.New(device.Config{})
	m, err := New(Options{Model: cfg, Kernels: k, Device: probe, MicroBatch: 2})
	if err != nil {
		t.Fatal(err)
	}
	// A budget with room for the scratch and one stash, not two.
	dev := device.New(device.Config{Budget: m.WorkspaceBytes() + m.StashBytes() + 100})
	m, err = New(Options{Model: cfg, Kernels: k, Device: dev, MicroBatch: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.NewStash(); err != nil {
		t.Fatal(err)
	}
	_, err = m.NewStash()
	if !errors.Is(err, device.ErrOutOfMemory) || !strings.Contains(err.Error(), "(act)") {
		t.Errorf("second stash: %v, want an act out-of-memory error", err)
	}
	if live := dev.Stats().Live[device.Act]; live != m.StashBytes() {
		t.Errorf("a failed NewStash leaked: act %d, want %d", live, m.StashBytes())
	}
}

func TestBadInputs(t *testing.T) {
	m, p, s, _ := setup(t, tiny, 2, 1)
	good := randomBatch(tiny, 2, 1)
	cases := []struct {
		name string
		b    Batch
		want string
	}{
		{"short", Batch{Inputs: good.Inputs[:3], Targets: good.Targets}, "want micro_batch·seq_len"},
		{"token too big", Batch{Inputs: append([]int32{11}, good.Inputs[1:]...), Targets: good.Targets}, "input token 11 at position 0"},
		{"negative target", Batch{Inputs: good.Inputs, Targets: append([]int32{-1}, good.Targets[1:]...)}, "target token -1"},
	}
	for _, c := range cases {
		if _, err := m.Forward(p, s, c.b); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
	if _, err := New(Options{Model: tiny, Device: device.New(device.Config{}), MicroBatch: 1}); err == nil {
		t.Error("New without kernels succeeded")
	}
	bad := tiny
	bad.Heads = 3
	k, _ := ops.New(ops.Config{})
	if _, err := New(Options{Model: bad, Kernels: k, Device: device.New(device.Config{}), MicroBatch: 1}); err == nil || !strings.Contains(err.Error(), "model.heads=3 does not divide model.hidden=8") {
		t.Errorf("New with bad heads: %v", err)
	}
	if _, err := m.EvalForward(p, s, good); err != nil {
		t.Fatal(err)
	}
	if err := m.Backward(p, s, 1); err == nil {
		t.Error("Backward after EvalForward succeeded")
	}
}

// TestRunnerBytesMatchesAllocation holds the float64 formulas (what a job
// is refused by before anything is allocated) to what New and NewStash
// really charge, so that a pre-allocation estimate built on them is the
// accounting, not a guess.
func TestRunnerBytesMatchesAllocation(t *testing.T) {
	for _, c := range []struct {
		cfg     Config
		B, thr  int
		dropout float64
	}{
		{Config{Layers: 2, Hidden: 32, Heads: 2, SeqLen: 16, Vocab: 64}, 2, 1, 0},
		{Config{Layers: 1, Hidden: 16, Heads: 4, SeqLen: 8, Vocab: 300}, 3, 2, 0.1},
		{Config{Layers: 3, Hidden: 64, Heads: 8, SeqLen: 4, Vocab: 16}, 1, 4, 0},
		{tinyLlama, 2, 2, 0},
		{tinyLlamaTied, 3, 4, 0.1},
		{moeShared, 2, 2, 0.1},
		{moeCapped, 3, 1, 0},
	} {
		cfg := c.cfg
		cfg.Dropout = c.dropout
		k, err := ops.New(ops.Config{Threads: c.thr})
		if err != nil {
			t.Fatal(err)
		}
		for _, pol := range policies {
			for _, flash := range []bool{false, true} {
				dev := device.New(device.Config{})
				gpt, err := New(Options{Model: cfg, Kernels: k, Device: dev, MicroBatch: c.B, Flash: flash, Precision: pol})
				if err != nil {
					t.Fatal(err)
				}
				workers := max(1, min(k.Threads(), c.B*cfg.KV()))
				if got, want := WorkspaceBytes(cfg, c.B, workers, flash, pol.Half()), float64(dev.Stats().LiveTotal); got != want {
					t.Errorf("%v B=%d %v flash=%v: WorkspaceBytes = %v, device holds %v", cfg, c.B, pol, flash, got, want)
				}
				if pol.Half() || flash {
					gpt.Free()
					continue
				}
				st, err := gpt.NewStash()
				if err != nil {
					t.Fatal(err)
				}
				if got, want := RunnerBytes(cfg, c.B, workers), float64(dev.Stats().LiveTotal); got != want {
					t.Errorf("%v B=%d: RunnerBytes = %v, device holds %v", cfg, c.B, got, want)
				}
				st.Free()
				gpt.Free()
			}
		}
		if got, want := cfg.ParamCount(), float64(cfg.NumParams()); got != want {
			t.Errorf("%v: ParamCount = %v, NumParams = %v", cfg, got, want)
		}
	}
}
