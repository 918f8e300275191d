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
	buf      *device.Buffer // the fp32 activations
	half     *device.Buffer // the 16-bit ones (nil without a 16-bit stash, see stash16.go)
	dev      *device.Device
	tokBytes int64

	inputs, targets []int32 // (B,T)
	step            int64
	sample          int
	eval            bool
	b, t            int // the shape of the current pass: (B,T) in training, (1,n) in inference

	res    [][]float32 // (L+1) × (B,T,C): res[l] is block l's input, res[L] the last block's output
	layers []layerActs // (L)
	lnf    []float32   // (B,T,C) final LayerNorm output (nil with a 16-bit stash)
	lnfh   []uint16    // (B,T,C) the same in 16-bit (16-bit stash only)
	lnfM   []float32   // (B,T) its mean
	lnfR   []float32   // (B,T) its rstd
	probs  []float32   // (B,T,V) softmax of the logits
	losses []float32   // (B,T)
}

// layerActs are one block's saved activations. Under tensor parallelism
// (C' = C/t, F = 4C/t, NH' = NH/t) the split parts shrink by t; n = B·T
// tokens, or B·T/t with sequence parallelism, in the LayerNorm and
// residual regions.
type layerActs struct {
	ln1, ln1M, ln1R []float32 // (n,C), (n), (n)
	qkv             []float32 // (B,T,3C')
	att             []float32 // (B,NH',T,T) attention probabilities; with flash, (B,NH',T) log-sum-exps
	atty            []float32 // (B,T,C') attention output before the projection
	res2            []float32 // (n,C) residual stream between attention and MLP
	ln2, ln2M, ln2R []float32 // (n,C), (n), (n)
	fc              []float32 // (B,T,F) MLP pre-activation
	fcg             []float32 // (B,T,F) GELU(fc)
	// With a 16-bit stash (stash16.go) these hold ln1, qkv, atty, ln2, fc
	// and fcg in the compute dtype instead, and the fp32 fields above are nil.
	ln1h, qkvh, attyh, ln2h, fch, fcgh []uint16
}

// stashFloats is the number of fp32 values in a stash, with n = BT
// (BT/t with SP), C' = C/t, F = 4C/t, NH' = NH/t, V' = ⌈V/t⌉:
//
//	(L+1)·nC + L·(3·nC + 4·n + 4·BTC' + 2·BTF + A) + nC + 2n + BTV' + BT
//
// with A = B·NH'·T² (attention probabilities) or, with flash, B·NH'·T
// (log-sum-exps), which for t = 1 is (L+1)·BTC + L·(15·BTC + 4·BT + B·NH·T²) + BTC + 2·BT + BTV + BT.
// Recomputation replaces the L·(…) term by dims.layersFloats: selective
// keeps one A for all layers, full one layer's activations. A 16-bit
// stash moves ln1, qkv, atty, ln2, fc, fcg and lnf to stashHalves.
func (m *GPT) stashFloats() int {
	c, d := m.cfg, m.d
	B, T, C := m.B, c.SeqLen, c.Hidden
	BT := B * T
	n := d.tokens(BT)
	return (c.Layers+1)*n*C + d.layersFloats(B, T, c.Layers) + d.headFloats(BT)
}

// headFloats is the head's fp32 activations: lnf nC (unless 16-bit), its
// statistics 2n, the probabilities BT·V' and the losses BT.
func (d dims) headFloats(BT int) int {
	n := d.tokens(BT)
	f := 2*n + BT*d.Vl + BT
	if !d.half {
		f += n * d.C
	}
	return f
}

// StashBytes is the size of one stash: its fp32 activations, its 16-bit
// ones and its two (B,T) int32 token arrays.
func (m *GPT) StashBytes() int64 {
	return int64(m.stashFloats())*4 + int64(m.stashHalves())*2 + 2*int64(m.B*m.cfg.SeqLen)*4
}

// NewStash allocates a stash for one micro-batch (tag act).
func (m *GPT) NewStash() (*Stash, error) {
	BT := m.B * m.cfg.SeqLen
	s, err := m.allocStash("stash", m.stashFloats(), m.stashHalves())
	if err != nil {
		return nil, err
	}
	c, d := m.cfg, m.d
	n := d.tokens(BT)
	nC := n * c.Hidden
	cv := s.carver()
	for l := 0; l <= c.Layers; l++ {
		s.res = append(s.res, cv.f32(nC))
	}
	s.layers = make([]layerActs, c.Layers)
	m.carveLayers(s, 0, c.Layers, cv)
	m.carveHead(s, cv)
	return s, nil
}

// allocStash allocates a stash of f fp32 and h 16-bit activations and its
// token arrays (tag act); what names it in errors.
func (m *GPT) allocStash(what string, f, h int) (*Stash, error) {
	BT := m.B * m.cfg.SeqLen
	tokBytes := 2 * int64(BT) * 4
	if err := m.dev.Reserve(device.Act, tokBytes); err != nil {
		return nil, fmt.Errorf("model: stash tokens: %w", err)
	}
	buf, err := m.dev.Alloc(device.Act, f)
	if err != nil {
		m.dev.Release(device.Act, tokBytes)
		return nil, fmt.Errorf("model: %s: %w", what, err)
	}
	s := &Stash{buf: buf, dev: m.dev, tokBytes: tokBytes, inputs: make([]int32, BT), targets: make([]int32, BT)}
	if h > 0 {
		if s.half, err = m.dev.AllocOf(device.Act, m.half.dt, h); err != nil {
			s.Free()
			return nil, fmt.Errorf("model: %s (%s): %w", what, m.half.dt, err)
		}
	}
	return s, nil
}

// Free returns the stash's memory to the device. Freeing twice is a no-op.
func (s *Stash) Free() {
	if s.buf == nil {
		return
	}
	s.buf.Free()
	s.half.Free()
	s.dev.Release(device.Act, s.tokBytes)
	s.buf, s.half = nil, nil
}

// Residual is residual stream l, (B,T,C) (with sequence parallelism the
// rank's B·T/t tokens): the input of block l, or for
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
