package model

import "trellis/tensor"

// embedding is the token and learned position embedding, vocab-parallel:
// rank r holds the rows [r·V', r·V' + vn) of wte (V' = ⌈V/t⌉, the rest of
// its rows padding: zero, never updated, never saved) and the whole wpe.
//
//	h₀ = drop(Σ_ranks wte_r[x]·[x held by r] + wpe)     g: ReduceFromTP (ScatterSeq with SP)
//
// Each rank looks up the ids it holds (zero rows for the others), so the
// sum over the group is exactly wte[x]; at t = 1 it is one kernel. A
// Llama's has no wpe (its positions are RoPE's, in attention). It saves
// nothing: its output is the first block's input residual and its
// dropout mask is recomputed.
type embedding struct{}

// forward sets out (the rank's tokens) = drop(wte[x] + wpe).
func (embedding) forward(m *GPT, s *Stash, out []float32, wte, wpe tensor.Buf) error {
	d := m.d
	C, bt := d.C, s.b*s.t
	n := d.tokens(bt)
	out = out[:n*C]
	switch {
	case d.llama && d.t == 1:
		m.k.LookupRows(out, s.inputs[:bt], wte, 0, d.vn, C)
	case d.t == 1 && m.cp != nil:
		m.k.LookupRows(out, s.inputs[:bt], wte, 0, d.vn, C)
		m.addPositions(out, out, wpe, 0, n)
	case d.t == 1:
		m.k.EncoderForward(out, s.inputs[:bt], wte, wpe, s.b, s.t, C)
	default:
		part := m.w.big[:bt*C]
		m.k.LookupRows(part, s.inputs[:bt], wte, d.vlo, d.vn, C)
		h, err := m.leave(part, bt)
		if err != nil {
			return err
		}
		switch {
		case d.llama:
			copy(out, h[:n*C])
		case m.cp != nil:
			m.addPositions(out, h, wpe, m.firstToken(bt), n)
		default:
			m.k.AddPositions(out, h, wpe, m.firstToken(bt), s.t, n, C)
		}
	}
	if m.useDropout(s) {
		m.dropout(s, m.drop.embd, out, out, n, false)
	}
	return nil
}

// backward ACCUMULATES the tables' gradients from dres, the gradient of
// the embedding's output (the rank's tokens; gathered with SP):
//
//	dwte[x] += d;  dwpe[t] += d        (dwpe nil: a Llama's)
func (embedding) backward(m *GPT, s *Stash, dwte, dwpe []float32) error {
	d := m.d
	C, bt := d.C, s.b*s.t
	dh := m.branchGrad(s, m.drop.embd)
	if m.cp != nil && !d.llama {
		full, err := m.leaveBack(dh, bt)
		if err != nil {
			return err
		}
		m.k.RowsBackward(dwte, nil, full, s.inputs[:bt], d.vlo, d.vn, s.t, C)
		for _, r := range m.runs(0, bt) {
			g, x := dwpe[r.pos*C:(r.pos+r.n)*C], full[r.at*C:(r.at+r.n)*C]
			for i, v := range x {
				g[i] += v
			}
		}
		return nil
	}
	if d.t == 1 && !d.llama {
		m.k.EncoderBackward(dwte, dwpe, dh, s.inputs[:bt], s.b, s.t, C)
		return nil
	}
	full, err := m.leaveBack(dh, bt)
	if err != nil {
		return err
	}
	m.k.RowsBackward(dwte, dwpe, full, s.inputs[:bt], d.vlo, d.vn, s.t, C)
	return nil
}

// firstToken is the index, in the pass's flattened B·T tokens, of the
// rank's first token in the norm and residual regions.
func (m *GPT) firstToken(bt int) int {
	if !m.d.sp {
		return 0
	}
	return m.d.r * bt / m.d.t
}

// addPositions sets out = h + wpe[position] for the rank's n tokens of a
// pass from its first at local token first, each at its global position
// (under cp the rank's chunks; wpe's rows widened exactly).
func (m *GPT) addPositions(out, h []float32, wpe tensor.Buf, first, n int) {
	C := m.d.C
	for _, r := range m.runs(first, n) {
		m.k.AddPositions(out[r.at*C:(r.at+r.n)*C], h[r.at*C:(r.at+r.n)*C], wpe, r.pos, m.cfg.SeqLen, r.n, C)
	}
}
