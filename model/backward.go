package model

import (
	"fmt"

	"trellis/ops"
	"trellis/rng"
)

// Backward runs the backward pass of the micro-batch whose forward pass
// filled s, for the loss dloss·mean(CE) (dloss = 1/grad_accum averages
// over micro-batches). Parameter gradients ACCUMULATE into p's gradient
// buffers; units are completed (GradsDone) in the order L+1, L, …, 1, 0.
func (m *GPT) Backward(p Params, s *Stash, dloss float32) error {
	defer m.pin()()
	if err := m.HeadBackward(p, s, dloss); err != nil {
		return err
	}
	for l := m.cfg.Layers - 1; l >= 0; l-- {
		if err := m.BlockBackward(p, s, l); err != nil {
			return err
		}
	}
	return m.EmbedBackward(p, s)
}

// grads fetches unit u's gradient buffer, wrapping the error.
func grads(p Params, u int) ([]float32, error) {
	g, err := p.Grads(u)
	if err != nil {
		return nil, fmt.Errorf("model: gradients of unit %d: %w", u, err)
	}
	return g, nil
}

func gradsDone(p Params, u int) error {
	if err := p.GradsDone(u); err != nil {
		return fmt.Errorf("model: gradients of unit %d done: %w", u, err)
	}
	return nil
}

// HeadBackward backpropagates the loss through the LM head (accumulating
// dwte into unit 0) and the final LayerNorm (unit L+1, then GradsDone),
// leaving the gradient with respect to Residual(L) in DResidual:
//
//	dlogits = (probs − onehot)·dloss/(B·T); dlnf = dlogits·wte; dwte += dlogitsᵀ·lnf
func (m *GPT) HeadBackward(p Params, s *Stash, dloss float32) error {
	defer m.pin()()
	if s.eval || s.b != m.B {
		return fmt.Errorf("model: the stash holds an evaluation or inference pass, not a training forward")
	}
	if m.part.Split() {
		return m.headBackwardTP(p, s, dloss)
	}
	c := m.cfg
	BT, C, V := s.b*s.t, c.Hidden, c.Vocab
	w, err := m.weights(p, 0, false)
	if err != nil {
		return err
	}
	g, err := grads(p, 0)
	if err != nil {
		m.release(p, 0)
		return err
	}
	dlogits := m.big[:BT*V]
	clear(dlogits)
	ops.CrossEntropyBackward(m.k, dlogits, s.probs, s.targets, dloss, BT, V)
	if m.d.half {
		m.linearBackwardSetH(m.dln, g[:V*C], nil, dlogits, s.lnfh, w[:V*C], BT, C, V)
	} else {
		m.linearBackwardSet(m.dln, g[:V*C], nil, dlogits, s.lnf, w[:V*C], BT, C, V)
	}
	m.release(p, 0)

	u := c.Layers + 1
	if w, err = weights(p, u); err != nil {
		return err
	}
	defer p.ReleaseWeights(u)
	if g, err = grads(p, u); err != nil {
		return err
	}
	clear(m.dres)
	gain := w[:C]
	if m.d.half {
		gain = m.halfVec(m.half.vec, gain)
	}
	ops.LayerNormBackward(m.k, m.dres, g[:C], g[C:2*C], m.dln, s.res[c.Layers], gain, s.lnfM, s.lnfR, BT, C)
	return gradsDone(p, u)
}

// BlockBackward backpropagates DResidual (the gradient with respect to
// Residual(l+1)) through block l (unit l+1), accumulating the block's
// parameter gradients and leaving the gradient with respect to Residual(l)
// in DResidual. Then GradsDone(l+1).
func (m *GPT) BlockBackward(p Params, s *Stash, l int) error {
	defer m.pin()()
	if l < 0 || l >= m.cfg.Layers {
		return fmt.Errorf("model: block %d out of range [0, %d)", l, m.cfg.Layers)
	}
	u := l + 1
	w, err := m.weights(p, u, false)
	if err != nil {
		return err
	}
	defer m.release(p, u)
	g, err := grads(p, u)
	if err != nil {
		return err
	}
	if err := m.recompute(w, s, l); err != nil {
		return err
	}
	if m.part.Split() {
		if err := m.blockBackwardTP(w, g, s, l); err != nil {
			return err
		}
		return gradsDone(p, u)
	}
	if m.d.half {
		m.blockBackwardHalf(w, g, s, l)
		return gradsDone(p, u)
	}
	c, k := m.cfg, m.k
	B, T, C := s.b, s.t, c.Hidden
	BT, BTC := B*T, B*T*C
	v, dv, a := viewBlock(w, C), viewBlock(g, C), &s.layers[l]

	// MLP branch: out = res2 + drop(fcg·Wfc2ᵀ + b). dres is d(out) and
	// becomes d(res2) when LN₂'s gradient is added to it.
	dfcg, dfc := m.big[:4*BTC], m.big[4*BTC:8*BTC]
	dbr := m.branchGrad(s, m.drop.mlp[l])
	m.linearBackwardSet(dfcg, dv.fc2w, dv.fc2b, dbr, a.fcg, v.fc2w, BT, 4*C, C)
	ops.GELUBackwardSet(k, dfc, a.fc, dfcg, BT*4*C)
	m.linearBackwardSet(m.dln, dv.fcw, dv.fcb, dfc, a.ln2, v.fcw, BT, C, 4*C)
	ops.LayerNormBackward(k, m.dres, dv.ln2w, dv.ln2b, m.dln, a.res2, v.ln2w, a.ln2M, a.ln2R, BT, C)

	// Attention branch: res2 = x + drop(atty·Wprojᵀ + b). dres becomes d(x).
	dqkv, datty := m.big[:3*BTC], m.big[4*BTC:5*BTC]
	dbr = m.branchGrad(s, m.drop.attn[l])
	m.linearBackwardSet(datty, dv.projw, dv.projb, dbr, a.atty, v.projw, BT, C, C)
	m.attnBackward(dqkv, datty, a, B, T, C, c.Heads)
	m.linearBackwardSet(m.dln, dv.qkvw, dv.qkvb, dqkv, a.ln1, v.qkvw, BT, C, 3*C)
	ops.LayerNormBackward(k, m.dres, dv.ln1w, dv.ln1b, m.dln, s.res[l], v.ln1w, a.ln1M, a.ln1R, BT, C)
	return gradsDone(p, u)
}

// branchGrad is the gradient with respect to a residual branch's output
// before dropout: DResidual itself, or DResidual⊙mask/(1−p) in the branch
// buffer.
func (m *GPT) branchGrad(s *Stash, site rng.Stream) []float32 {
	n := m.d.tokens(s.b*s.t) * m.cfg.Hidden
	if !m.useDropout(s) {
		return m.dres[:n]
	}
	br := m.branch[:n]
	clear(br)
	m.dropoutAt(s, site).Backward(m.k, br, m.dres, n)
	return br
}

// EmbedBackward backpropagates DResidual (the gradient with respect to
// Residual(0)) into the embedding tables (unit 0), then GradsDone(0):
//
//	dwte[inputs[b,t]] += d[b,t];  dwpe[t] += d[b,t]
func (m *GPT) EmbedBackward(p Params, s *Stash) error {
	defer m.pin()()
	g, err := grads(p, 0)
	if err != nil {
		return err
	}
	if m.part.Split() {
		if err := m.embedBackwardTP(g, s); err != nil {
			return err
		}
		return gradsDone(p, 0)
	}
	c := m.cfg
	C := c.Hidden
	d := m.branchGrad(s, m.drop.embd)
	ops.EncoderBackward(m.k, g[:c.Vocab*C], g[c.Vocab*C:], d, s.inputs, s.b, s.t, C)
	return gradsDone(p, 0)
}
