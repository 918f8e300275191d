package model

import (
	"fmt"

	"trellis/ops"
)

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
//	logits = LN_f(h[n−1])·wteᵀ
//
// It recomputes the whole prefix (no key/value cache), using s as scratch;
// s must not hold a forward pass whose backward is still to come.
func (m *GPT) Logits(p Params, s *Stash, prefix []int32, dst []float32) error {
	c := m.cfg
	n := len(prefix)
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
	if err := m.finalNorm(p, s); err != nil {
		return err
	}
	w, err := m.weights(p, 0, true)
	if err != nil {
		return err
	}
	defer m.release(p, 0)
	C := c.Hidden
	if m.part.Split() {
		return m.logitsTP(w, s, n, dst)
	}
	if m.d.half { // the 16-bit stash's last row and the 16-bit wte
		m.halfLinearHead(dst, s.lnfh[(n-1)*C:n*C], w)
		return nil
	}
	m.k.MatMul(ops.NT, 1, c.Vocab, C, s.lnf[(n-1)*C:n*C], C, w[:c.Vocab*C], C, dst, c.Vocab, false)
	return nil
}

// logitsTP is Logits' head for a split part: the rank's V' logits of the
// last position, gathered over the group (the padding dropped).
func (m *GPT) logitsTP(w []float32, s *Stash, n int, dst []float32) error {
	d := m.d
	C := d.C
	local, all := m.big[:d.Vl], m.big[d.Vl:d.Vl+d.t*d.Vl]
	if d.half { // the 16-bit stash's last row and the rank's 16-bit wte rows
		x, err := m.enterColH(s.lnfh[:d.tokens(s.t)*C], s.t)
		if err != nil {
			return err
		}
		m.linearForwardH(local, nil, x[(n-1)*C:n*C], w[:d.Vl*C], nil, 1, C, d.Vl)
	} else {
		z, err := m.enterCol(s.lnf[:d.tokens(s.t)*C], s.t)
		if err != nil {
			return err
		}
		m.k.MatMul(ops.NT, 1, d.Vl, C, z[(n-1)*C:n*C], C, w[:d.Vl*C], C, local, d.Vl, false)
	}
	if err := m.tp.GatherSeq(all, local); err != nil {
		return err
	}
	copy(dst, all[:m.cfg.Vocab])
	return nil
}
