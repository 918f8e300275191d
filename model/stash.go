package model

import (
	"fmt"

	"trellis/device"
)

// Batch is one micro-batch.
type Batch struct {
	Inputs  []int32 // (B,T) token ids in [0, V)
	Targets []int32 // (B,T) the next tokens
	Step    int64   // the optimizer step, for dropout keys
	Sample  int     // global index of the micro-batch's first sequence in the step, for dropout keys
	Eval    bool    // no dropout (validation)
}

// Stash holds the activations of one micro-batch that the backward pass
// needs, allocated on the device with tag act. A pipeline keeps one per
// micro-batch in flight.
type Stash struct {
	buf      *device.Buffer
	dev      *device.Device
	tokBytes int64

	inputs, targets []int32 // (B,T)
	step            int64
	sample          int
	eval            bool
	b, t            int // the shape of the current pass: (B,T) in training, (1,n) in inference

	res    [][]float32 // (L+1) × (B,T,C): res[l] is block l's input, res[L] the last block's output
	layers []layerActs // (L)
	lnf    []float32   // (B,T,C) final LayerNorm output
	lnfM   []float32   // (B,T) its mean
	lnfR   []float32   // (B,T) its rstd
	probs  []float32   // (B,T,V) softmax of the logits
	losses []float32   // (B,T)
}

// layerActs are one block's saved activations.
type layerActs struct {
	ln1, ln1M, ln1R []float32 // (B,T,C), (B,T), (B,T)
	qkv             []float32 // (B,T,3C)
	att             []float32 // (B,NH,T,T) attention probabilities; with flash, (B,NH,T) log-sum-exps
	atty            []float32 // (B,T,C) attention output before the projection
	res2            []float32 // (B,T,C) residual stream between attention and MLP
	ln2, ln2M, ln2R []float32 // (B,T,C), (B,T), (B,T)
	fc              []float32 // (B,T,4C) MLP pre-activation
	fcg             []float32 // (B,T,4C) GELU(fc)
}

// stashFloats is the number of fp32 values in a stash:
//
//	(L+1)·BTC + L·(15·BTC + 4·BT + A) + BTC + 2·BT + BTV + BT
//
// with A = B·NH·T² (attention probabilities) or, with flash, B·NH·T
// (log-sum-exps).
func (m *GPT) stashFloats() int {
	c := m.cfg
	B, T, C := m.B, c.SeqLen, c.Hidden
	BT, BTC := B*T, B*T*C
	return (c.Layers+1)*BTC + c.Layers*(15*BTC+4*BT+m.attFloats()) + BTC + 2*BT + BT*c.Vocab + BT
}

// attFloats is A above: what one layer's attention keeps for its backward.
func (m *GPT) attFloats() int {
	n := m.B * m.cfg.Heads * m.cfg.SeqLen
	if m.flash {
		return n
	}
	return n * m.cfg.SeqLen
}

// StashBytes is the size of one stash: its fp32 activations and its two
// (B,T) int32 token arrays.
func (m *GPT) StashBytes() int64 {
	return int64(m.stashFloats())*4 + 2*int64(m.B*m.cfg.SeqLen)*4
}

// NewStash allocates a stash for one micro-batch (tag act).
func (m *GPT) NewStash() (*Stash, error) {
	BT := m.B * m.cfg.SeqLen
	tokBytes := 2 * int64(BT) * 4
	if err := m.dev.Reserve(device.Act, tokBytes); err != nil {
		return nil, fmt.Errorf("model: stash tokens: %w", err)
	}
	buf, err := m.dev.Alloc(device.Act, m.stashFloats())
	if err != nil {
		m.dev.Release(device.Act, tokBytes)
		return nil, fmt.Errorf("model: stash: %w", err)
	}
	s := &Stash{buf: buf, dev: m.dev, tokBytes: tokBytes, inputs: make([]int32, BT), targets: make([]int32, BT)}
	c := m.cfg
	C := c.Hidden
	BTC := BT * C
	data := buf.Data
	next := func(n int) []float32 {
		x := data[:n:n]
		data = data[n:]
		return x
	}
	for l := 0; l <= c.Layers; l++ {
		s.res = append(s.res, next(BTC))
	}
	for l := 0; l < c.Layers; l++ {
		var a layerActs
		a.ln1, a.ln1M, a.ln1R = next(BTC), next(BT), next(BT)
		a.qkv, a.att, a.atty, a.res2 = next(3*BTC), next(m.attFloats()), next(BTC), next(BTC)
		a.ln2, a.ln2M, a.ln2R = next(BTC), next(BT), next(BT)
		a.fc, a.fcg = next(4*BTC), next(4*BTC)
		s.layers = append(s.layers, a)
	}
	s.lnf, s.lnfM, s.lnfR = next(BTC), next(BT), next(BT)
	s.probs, s.losses = next(BT*c.Vocab), next(BT)
	return s, nil
}

// Free returns the stash's memory to the device. Freeing twice is a no-op.
func (s *Stash) Free() {
	if s.buf == nil {
		return
	}
	s.buf.Free()
	s.dev.Release(device.Act, s.tokBytes)
	s.buf = nil
}

// Residual is residual stream l, (B,T,C): the input of block l, or for
// l = L the output of the last block. A pipeline stage writes its received
// activations into Residual(first block) before BlockForward, and sends
// Residual(last block + 1) after.
func (s *Stash) Residual(l int) []float32 { return s.res[l] }

// Losses are the per-token losses of the last forward pass, (B,T).
func (s *Stash) Losses() []float32 { return s.losses[:s.b*s.t] }

// Load validates a batch and records it in the stash: tokens, step and
// sample. Forward calls it; a pipeline stage without the embedding calls
// it before its first BlockForward.
func (m *GPT) Load(s *Stash, b Batch) error {
	if s.buf == nil {
		return fmt.Errorf("model: stash has been freed")
	}
	BT := m.B * m.cfg.SeqLen
	if len(b.Inputs) != BT || len(b.Targets) != BT {
		return fmt.Errorf("model: batch has %d inputs and %d targets, want micro_batch·seq_len = %d·%d = %d",
			len(b.Inputs), len(b.Targets), m.B, m.cfg.SeqLen, BT)
	}
	if err := m.checkTokens("input", b.Inputs); err != nil {
		return err
	}
	if err := m.checkTokens("target", b.Targets); err != nil {
		return err
	}
	copy(s.inputs, b.Inputs)
	copy(s.targets, b.Targets)
	s.step, s.sample, s.eval = b.Step, b.Sample, b.Eval
	s.b, s.t = m.B, m.cfg.SeqLen
	return nil
}

func (m *GPT) checkTokens(what string, toks []int32) error {
	for i, t := range toks {
		if t < 0 || int(t) >= m.cfg.Vocab {
			return fmt.Errorf("model: %s token %d at position %d is outside the vocabulary [0, %d)", what, t, i, m.cfg.Vocab)
		}
	}
	return nil
}
