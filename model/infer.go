package model

import "fmt"

// EvalForward is Forward without dropout, for validation loss. A stash it
// fills cannot be used for Backward.
func (m *GPT) EvalForward(p Params, s *Stash, b Batch) (float32, error) {
	defer m.pin()()
	b.Eval = true
	return m.Forward(p, s, b)
}

// Logits writes into dst (V) the next-token logits after prefix, a single
// sequence of 1..T tokens, without dropout:
//
//	logits = LN_f(h[n−1])·wteᵀ       (an untied head's own weights for wte)
//
// It recomputes the whole prefix (no key/value cache), using s as scratch;
// s must not hold a forward pass whose backward is still to come.
func (m *GPT) Logits(p Params, s *Stash, prefix []int32, dst []float32) error {
	c := m.cfg
	n := len(prefix)
	if m.cp != nil {
		return fmt.Errorf("model: logits of a prefix under cp=%d: the ring splits every sequence over the group; sample on one rank (trellis sample on a checkpoint)", m.split.n)
	}
	if n < 1 || n > c.SeqLen {
		return fmt.Errorf("model: prefix of %d tokens, want 1 to seq_len=%d", n, c.SeqLen)
	}
	if len(dst) != c.Vocab {
		return fmt.Errorf("model: logits buffer of %d, want vocab=%d", len(dst), c.Vocab)
	}
	if s.buf == nil {
		return fmt.Errorf("model: stash has been freed")
	}
	if err := m.checkTokens("prefix", prefix); err != nil {
		return err
	}
	copy(s.inputs, prefix)
	s.b, s.t, s.eval = 1, n, true
	if m.d.sp { // the tokens split evenly over the group: pad the end (causal, so harmless)
		s.t = (n + m.d.t - 1) / m.d.t * m.d.t
		clear(s.inputs[n:s.t])
	}
	if err := m.EmbedForward(p, s); err != nil {
		return err
	}
	for l := 0; l < c.Layers; l++ {
		if err := m.BlockForward(p, s, l); err != nil {
			return err
		}
	}
	h := newHead(m.d)
	if !m.d.tied {
		u := c.Layers + 1
		w, err := m.weights(p, u)
		if err != nil {
			return err
		}
		defer p.ReleaseWeights(u)
		t := tensorsOf(m.layout.Units[u], w)
		gain, bias := m.normVecs(t)
		return h.lastLogits(m, s, h.normForward(m, s, s.res[c.Layers], gain, bias), t[1], n, dst)
	}
	z, err := m.finalNorm(p, s, h)
	if err != nil {
		return err
	}
	w, err := m.weights(p, 0)
	if err != nil {
		return err
	}
	defer p.ReleaseWeights(0)
	return h.lastLogits(m, s, z, tensorsOf(m.layout.Units[0], w)[0], n, dst)
}
