package model

import (
	"fmt"

	"trellis/ops"
)

// Forward runs the whole forward pass of one micro-batch and returns the
// mean cross-entropy loss over its B·T tokens. The activations the backward
// pass needs are saved in s.
func (m *GPT) Forward(p Params, s *Stash, b Batch) (float32, error) {
	defer m.pin()()
	if err := m.Load(s, b); err != nil {
		return 0, err
	}
	if err := m.EmbedForward(p, s); err != nil {
		return 0, err
	}
	for l := 0; l < m.cfg.Layers; l++ {
		if err := m.BlockForward(p, s, l); err != nil {
			return 0, err
		}
	}
	return m.HeadForward(p, s)
}

// weights fetches unit u's weights, wrapping the error.
func weights(p Params, u int) ([]float32, error) {
	w, err := p.Weights(u)
	if err != nil {
		return nil, fmt.Errorf("model: weights of unit %d: %w", u, err)
	}
	return w, nil
}

// EmbedForward computes Residual(0) = drop(wte[inputs] + wpe) for the
// batch Load recorded (unit 0).
func (m *GPT) EmbedForward(p Params, s *Stash) error {
	defer m.pin()()
	w, err := m.weights(p, 0, true)
	if err != nil {
		return err
	}
	defer m.release(p, 0)
	if m.part.Split() {
		return m.embedForwardTP(w, s)
	}
	c := m.cfg
	C, n := c.Hidden, s.b*s.t*c.Hidden
	wte, wpe := w[:c.Vocab*C], w[c.Vocab*C:]
	if m.d.half {
		m.embedForwardHalf(s.res[0][:n], s.inputs[:s.b*s.t], wte, wpe, s.b, s.t, C)
	} else {
		ops.EncoderForward(m.k, s.res[0][:n], s.inputs[:s.b*s.t], wte, wpe, s.b, s.t, C)
	}
	if m.useDropout(s) {
		m.dropoutAt(s, m.drop.embd).Forward(m.k, s.res[0], s.res[0], n)
	}
	return nil
}

// BlockForward runs block l (unit l+1) from Residual(l) to Residual(l+1):
//
//	ln1 = LN₁(x); qkv = ln1·Wqkvᵀ + b; atty = Attn(qkv)
//	res2 = x + drop(atty·Wprojᵀ + b)
//	ln2 = LN₂(res2); fc = ln2·Wfcᵀ + b; fcg = GELU(fc)
//	out = res2 + drop(fcg·Wfc2ᵀ + b)
func (m *GPT) BlockForward(p Params, s *Stash, l int) error {
	defer m.pin()()
	if l < 0 || l >= m.cfg.Layers {
		return fmt.Errorf("model: block %d out of range [0, %d)", l, m.cfg.Layers)
	}
	w, err := m.weights(p, l+1, true)
	if err != nil {
		return err
	}
	defer m.release(p, l+1)
	return m.blockForward(w, s, l)
}

// blockForward is BlockForward with block l's weights w.
func (m *GPT) blockForward(w []float32, s *Stash, l int) error {
	if m.part.Split() {
		return m.blockForwardTP(w, s, l)
	}
	if m.d.half {
		m.blockForwardHalf(w, s, l)
		return nil
	}
	c, k := m.cfg, m.k
	B, T, C := s.b, s.t, c.Hidden
	BT := B * T
	v, a := viewBlock(w, C), &s.layers[l]
	x, out := s.res[l], s.res[l+1]
	ops.LayerNormForward(k, a.ln1, a.ln1M, a.ln1R, x, v.ln1w, v.ln1b, BT, C)
	m.linearForward(a.qkv, nil, a.ln1, v.qkvw, v.qkvb, BT, C, 3*C)
	m.attnForward(a, B, T, C, c.Heads)
	m.residualBranch(s, a.res2, x, a.atty, v.projw, v.projb, C, l, false)
	ops.LayerNormForward(k, a.ln2, a.ln2M, a.ln2R, a.res2, v.ln2w, v.ln2b, BT, C)
	m.linearForward(a.fc, nil, a.ln2, v.fcw, v.fcb, BT, C, 4*C)
	ops.GELUForward(k, a.fcg, a.fc, BT*4*C)
	m.residualBranch(s, out, a.res2, a.fcg, v.fc2w, v.fc2b, 4*C, l, true)
	return nil
}

// residualBranch computes out = res + drop(inp·wᵀ + b), fused into one
// matmul when there is no dropout.
func (m *GPT) residualBranch(s *Stash, out, res, inp, w, b []float32, in, l int, mlp bool) {
	BT, C := s.b*s.t, m.cfg.Hidden
	if !m.useDropout(s) {
		m.linearForward(out, res, inp, w, b, BT, in, C)
		return
	}
	site := m.drop.attn[l]
	if mlp {
		site = m.drop.mlp[l]
	}
	br := m.branch[:BT*C]
	m.linearForward(br, nil, inp, w, b, BT, in, C)
	m.dropoutAt(s, site).Forward(m.k, br, br, BT*C)
	ops.ResidualForward(m.k, out, res, br, BT*C)
}

// HeadForward applies the final LayerNorm (unit L+1) and the tied LM head
// (unit 0) to Residual(L) and returns the mean cross-entropy loss:
//
//	lnf = LN_f(h); logits = lnf·wteᵀ; loss = mean CE(logits, targets)
//
// The softmax probabilities are saved for the backward pass.
func (m *GPT) HeadForward(p Params, s *Stash) (float32, error) {
	defer m.pin()()
	if err := m.finalNorm(p, s); err != nil {
		return 0, err
	}
	w, err := m.weights(p, 0, true)
	if err != nil {
		return 0, err
	}
	defer m.release(p, 0)
	if m.part.Split() {
		return m.headForwardTP(w, s)
	}
	c := m.cfg
	BT := s.b * s.t
	probs := s.probs[:BT*c.Vocab]
	if m.d.half {
		m.linearForwardH(probs, nil, s.lnfh, w[:c.Vocab*c.Hidden], nil, BT, c.Hidden, c.Vocab)
	} else {
		m.linearForward(probs, nil, s.lnf, w[:c.Vocab*c.Hidden], nil, BT, c.Hidden, c.Vocab)
	}
	return ops.CrossEntropyForward(m.k, probs, s.losses[:BT], probs, s.targets[:BT], BT, c.Vocab), nil
}

// finalNorm computes lnf = LN_f(Residual(L)) (unit L+1); a 16-bit stash
// keeps it rounded (computed in the big scratch).
func (m *GPT) finalNorm(p Params, s *Stash) error {
	u := m.cfg.Layers + 1
	w, err := weights(p, u)
	if err != nil {
		return err
	}
	defer p.ReleaseWeights(u)
	C, n := m.cfg.Hidden, m.d.tokens(s.b*s.t)
	out, gb := s.lnf, w[:2*C]
	if m.d.half {
		out, gb = m.big, m.halfVec(m.half.vec, gb)
	}
	ops.LayerNormForward(m.k, out[:n*C], s.lnfM, s.lnfR, s.res[m.cfg.Layers][:n*C], gb[:C], gb[C:2*C], n, C)
	if m.d.half {
		m.encode(s.lnfh, out[:n*C])
	}
	return nil
}
