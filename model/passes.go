package model

import (
	"fmt"

	"trellis/rng"
	"trellis/tensor"
)

// The passes over units: what a pipeline stage's executor calls, action
// by action, and what Forward and Backward string together for the whole
// model. Each fetches its units' weights (Params.Weights … ReleaseWeights)
// and gradient buffers, runs the layers and reports the units' gradients
// done.

// Forward runs the whole forward pass of one micro-batch and returns the
// mean cross-entropy loss over its B·T tokens. The activations the
// backward pass needs are saved in s.
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

// EmbedForward computes Residual(0) = drop(wte[inputs] + wpe) for the
// batch Load recorded (unit 0).
func (m *GPT) EmbedForward(p Params, s *Stash) error {
	defer m.pin()()
	w, err := m.weights(p, 0)
	if err != nil {
		return err
	}
	defer p.ReleaseWeights(0)
	t := tensorsOf(m.layout.Units[0], w)
	var wpe tensor.Buf
	if len(t) > 1 {
		wpe = t[1]
	}
	return embedding{}.forward(m, s, s.res[0], t[0], wpe)
}

// BlockForward runs block l (unit l+1) from Residual(l) to Residual(l+1).
func (m *GPT) BlockForward(p Params, s *Stash, l int) error {
	defer m.pin()()
	if l < 0 || l >= m.cfg.Layers {
		return fmt.Errorf("model: block %d out of range [0, %d)", l, m.cfg.Layers)
	}
	w, err := m.weights(p, l+1)
	if err != nil {
		return err
	}
	defer p.ReleaseWeights(l + 1)
	m.at(l, !s.eval)
	return newBlock(m.d).forward(m, s, m.blockWeights(m.layout.Units[l+1], w), l)
}

// HeadForward applies the final norm (unit L+1) and the LM head — tied:
// unit 0's token embedding; untied: unit L+1's own — to Residual(L) and
// returns the mean cross-entropy loss; the probabilities are saved for
// the backward pass.
func (m *GPT) HeadForward(p Params, s *Stash) (float32, error) {
	defer m.pin()()
	h := newHead(m.d)
	if !m.d.tied {
		u := m.cfg.Layers + 1
		w, err := m.weights(p, u)
		if err != nil {
			return 0, err
		}
		defer p.ReleaseWeights(u)
		t := tensorsOf(m.layout.Units[u], w)
		gain, bias := m.normVecs(t)
		return h.forward(m, s, h.normForward(m, s, s.res[m.cfg.Layers], gain, bias), t[1])
	}
	z, err := m.finalNorm(p, s, h)
	if err != nil {
		return 0, err
	}
	w, err := m.weights(p, 0)
	if err != nil {
		return 0, err
	}
	defer p.ReleaseWeights(0)
	return h.forward(m, s, z, tensorsOf(m.layout.Units[0], w)[0])
}

// normVecs are the final norm's gain and bias (nil for RMSNorm) among
// unit L+1's tensors t, in fp32.
func (m *GPT) normVecs(t []tensor.Buf) (gain, bias []float32) {
	v := m.vecs()
	if m.d.llama {
		return v.of(t[0]), nil
	}
	return v.of(t[0]), v.of(t[1])
}

// finalNorm computes the head's lnf = LN_f(Residual(L)) under its own
// hold of unit L+1's weights.
func (m *GPT) finalNorm(p Params, s *Stash, h head) (tensor.Buf, error) {
	u := m.cfg.Layers + 1
	w, err := m.weights(p, u)
	if err != nil {
		return tensor.Buf{}, err
	}
	defer p.ReleaseWeights(u)
	gain, bias := m.normVecs(tensorsOf(m.layout.Units[u], w))
	return h.normForward(m, s, s.res[m.cfg.Layers], gain, bias), nil
}

// HeadBackward backpropagates the loss through the LM head (accumulating
// its gradient: tied into unit 0's token embedding, untied into unit
// L+1's lm_head) and the final norm (unit L+1, then GradsDone), leaving
// the gradient with respect to Residual(L) in DResidual.
func (m *GPT) HeadBackward(p Params, s *Stash, dloss float32) error {
	defer m.pin()()
	if s.eval || s.b != m.B {
		return fmt.Errorf("model: the stash holds an evaluation or inference pass, not a training forward")
	}
	h := newHead(m.d)
	u := m.cfg.Layers + 1
	s.lossW = dloss
	var dz []float32
	if m.d.tied {
		w, err := m.weights(p, 0)
		if err != nil {
			return err
		}
		g, err := grads(p, 0)
		if err != nil {
			p.ReleaseWeights(0)
			return err
		}
		dz, err = h.backward(m, s, gradsOf(m.layout.Units[0], g)[0], tensorsOf(m.layout.Units[0], w)[0], dloss)
		p.ReleaseWeights(0)
		if err != nil {
			return err
		}
	}
	nw, err := m.weights(p, u)
	if err != nil {
		return err
	}
	defer p.ReleaseWeights(u)
	g, err := grads(p, u)
	if err != nil {
		return err
	}
	t, dg := tensorsOf(m.layout.Units[u], nw), gradsOf(m.layout.Units[u], g)
	if !m.d.tied {
		if dz, err = h.backward(m, s, dg[1], t[1], dloss); err != nil {
			return err
		}
	}
	gain, _ := m.normVecs(t)
	var dbias []float32
	if !m.d.llama {
		dbias = dg[1]
	}
	if err := h.normBackward(m, s, s.res[m.cfg.Layers], dz, dg[0], dbias, gain); err != nil {
		return err
	}
	return gradsDone(p, u)
}

// BlockBackward backpropagates DResidual (the gradient with respect to
// Residual(l+1)) through block l (unit l+1), accumulating the block's
// parameter gradients and leaving the gradient with respect to Residual(l)
// in DResidual. Then GradsDone(l+1).
func (m *GPT) BlockBackward(p Params, s *Stash, l int) error {
	return m.blockBackward(p, s, nil, l)
}

// BlockBackwardInput is BlockBackward without the four linears' weight
// gradients: it backpropagates DResidual through block l, accumulating the
// biases' and norms' gradients, and saves each linear's output gradient
// dY in w for BlockBackwardWeight. It does not call GradsDone.
func (m *GPT) BlockBackwardInput(p Params, s *Stash, w *WeightStash, l int) error {
	d, err := w.of(l)
	if err != nil {
		return err
	}
	return m.blockBackward(p, s, d, l)
}

// blockBackward is BlockBackward, or with d BlockBackwardInput.
func (m *GPT) blockBackward(p Params, s *Stash, d *deferred, l int) error {
	defer m.pin()()
	if l < 0 || l >= m.cfg.Layers {
		return fmt.Errorf("model: block %d out of range [0, %d)", l, m.cfg.Layers)
	}
	u := l + 1
	wb, err := m.weights(p, u)
	if err != nil {
		return err
	}
	defer p.ReleaseWeights(u)
	g, err := grads(p, u)
	if err != nil {
		return err
	}
	b, w := newBlock(m.d), m.blockWeights(m.layout.Units[u], wb)
	m.at(l, true)
	if m.d.rc == RecomputeFull { // the stash holds one block's activations: rerun this block's forward
		m.rerun = true
		err := b.forward(m, s, w, l)
		m.rerun = false
		if err != nil {
			return err
		}
	}
	if err := b.backward(m, s, w, m.blockGradsOf(m.layout.Units[u], g), d, l); err != nil {
		return err
	}
	if d != nil {
		return nil
	}
	return gradsDone(p, u)
}

// BlockBackwardWeight accumulates block l's four linear weight gradients
// from the output gradients BlockBackwardInput saved and the inputs in s,
// then calls GradsDone(l+1). With full recomputation it reruns block l's
// forward first, under its own hold of the block's weights (other blocks'
// passes overwrote the shared activations since BlockBackwardInput).
// Together the two give BlockBackward's gradients bit for bit.
func (m *GPT) BlockBackwardWeight(p Params, s *Stash, w *WeightStash, l int) error {
	defer m.pin()()
	d, err := w.of(l)
	if err != nil {
		return err
	}
	u := l + 1
	b := newBlock(m.d)
	m.at(l, true)
	if m.d.rc == RecomputeFull {
		wb, err := m.weights(p, u)
		if err != nil {
			return err
		}
		m.rerun = true
		err = b.forward(m, s, m.blockWeights(m.layout.Units[u], wb), l)
		m.rerun = false
		p.ReleaseWeights(u)
		if err != nil {
			return err
		}
	}
	g, err := grads(p, u)
	if err != nil {
		return err
	}
	if err := b.weightGrads(m, s, m.blockGradsOf(m.layout.Units[u], g), d, l); err != nil {
		return err
	}
	return gradsDone(p, u)
}

// EmbedBackward backpropagates DResidual (the gradient with respect to
// Residual(0)) into the embedding tables (unit 0), then GradsDone(0).
func (m *GPT) EmbedBackward(p Params, s *Stash) error {
	defer m.pin()()
	g, err := grads(p, 0)
	if err != nil {
		return err
	}
	t := gradsOf(m.layout.Units[0], g)
	var dwpe []float32
	if len(t) > 1 {
		dwpe = t[1]
	}
	if err := (embedding{}).backward(m, s, t[0], dwpe); err != nil {
		return err
	}
	return gradsDone(p, 0)
}

// branchGrad is the gradient with respect to a residual branch's output
// before dropout: DResidual itself, or DResidual⊙mask/(1−p) in the branch
// buffer (the rank's tokens).
func (m *GPT) branchGrad(s *Stash, site rng.Stream) []float32 {
	n := m.d.tokens(s.b*s.t) * m.cfg.Hidden
	if !m.useDropout(s) {
		return m.w.dres[:n]
	}
	br := m.w.branch[:n]
	clear(br)
	m.dropout(s, site, br, m.w.dres, n/m.cfg.Hidden, true)
	return br
}
