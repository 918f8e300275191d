package model

import (
	"fmt"

	"trellis/ops"
	"trellis/rng"
)

// cpSplit is a rank's share of every sequence under context parallelism
// (cp = n ranks): the T positions are cut into 2n chunks of c = T/(2n)
// and rank r holds two of them, its local rows [0, c) and [c, 2c):
//
//	load-balanced (causal)   chunks r and 2n−1−r
//	contiguous               chunks 2r and 2r+1 (positions [2rc, 2(r+1)c))
//
// Under a causal mask chunk k's queries see k+1 chunks of keys, so the
// contiguous split gives the last rank 4n−1 chunk pairs and the first 3,
// where the load-balanced one gives every rank 2n+1 (its two chunks'
// (r+1) + (2n−r) pairs). Everything keyed by position follows the split:
// the learned position embedding's rows, RoPE's angles, the dropout masks
// (their element index is the token's global one) and the data loader's
// token ranges.
type cpSplit struct {
	n, r       int
	T, c       int // the global sequence length and the chunk length
	contiguous bool
}

// chunk is the global chunk index of local chunk k (0 or 1).
func (p cpSplit) chunk(k int) int {
	if p.contiguous {
		return 2*p.r + k
	}
	if k == 0 {
		return p.r
	}
	return 2*p.n - 1 - p.r
}

// pos is the global position of local row j in [0, 2c).
func (p cpSplit) pos(j int) int { return p.chunk(j/p.c)*p.c + j%p.c }

// ranges are the rank's token ranges [lo, hi) of a sequence, in the order
// of its local rows: what the data loader reads for it.
func (p cpSplit) ranges() [][2]int {
	a, b := p.chunk(0)*p.c, p.chunk(1)*p.c
	return [][2]int{{a, a + p.c}, {b, b + p.c}}
}

// CPRanges are the token ranges [lo, hi) of every sequence that rank r of
// a context-parallel group of n ranks holds, in its rows' order, for
// sequences of T tokens (2n must divide T): chunks r and 2n−1−r of 2n
// (contiguous: 2r and 2r+1).
func CPRanges(T, n, r int, contiguous bool) ([][2]int, error) {
	if err := checkCP(T, n); err != nil {
		return nil, err
	}
	return cpSplit{n: n, r: r, T: T, c: T / (2 * n), contiguous: contiguous}.ranges(), nil
}

func checkCP(T, n int) error {
	if n > 1 && T%(2*n) != 0 {
		return fmt.Errorf("cp=%d: 2·cp=%d does not divide model.seq_len=%d (each rank holds two of 2·cp equal chunks of every sequence)", n, 2*n, T)
	}
	return nil
}

// run is a stretch of a pass's local tokens that are consecutive in their
// sequence: local tokens [at, at+n) of the flattened (B, T/cp) are
// positions [pos, pos+n) of sequence b of the micro-batch.
type run struct{ at, b, pos, n int }

// runs splits local tokens [first, first+n) of the flattened (B, T/cp)
// pass of a cp runner into runs, chunk by chunk.
func (m *GPT) runs(first, n int) []run {
	tl := m.T
	var out []run
	c := m.split.c
	for i := first; i < first+n; {
		b, j := i/tl, i%tl
		k := min(first+n-i, c-j%c)
		out = append(out, run{at: i - first, b: b, pos: m.split.pos(j), n: k})
		i += k
	}
	return out
}

// dropout applies (or with back, backpropagates) the site's dropout to
// the rank's n tokens of a pass (the first at firstToken), keyed by each
// token's global element index, so any cp (and tp ± sp) draws the single
// device's masks. Forward: out = drop(in); backward: out += drop'(in).
func (m *GPT) dropout(s *Stash, site rng.Stream, out, in []float32, n int, back bool) {
	C := m.cfg.Hidden
	apply := func(d ops.Dropout, o, x []float32, k int) {
		if back {
			m.k.DropoutBackward(d, o, x, k)
		} else {
			m.k.DropoutForward(d, o, x, k)
		}
	}
	if m.cp == nil {
		apply(m.dropoutAt(s, site), out, in, n*C)
		return
	}
	d := m.dropoutAt(s, site)
	for _, r := range m.runs(m.firstToken(s.b*s.t), n) {
		d.Offset = (uint64(s.sample+r.b)*uint64(m.cfg.SeqLen) + uint64(r.pos)) * uint64(C)
		apply(d, out[r.at*C:(r.at+r.n)*C], in[r.at*C:(r.at+r.n)*C], r.n*C)
	}
}

// ropeTable fills the RoPE table (T/cp, HS/2) with the angles of the
// rank's positions, chunk by chunk (ops.RoPETable's values row for row).
func (m *GPT) ropeTable() {
	h := m.d.HS / 2
	if m.cp == nil {
		m.k.RoPETable(m.w.cos, m.w.sin, m.T, m.d.HS, m.cfg.Theta())
		return
	}
	c := m.split.c
	for k := 0; k < 2; k++ {
		m.k.RoPETableRows(m.w.cos[k*c*h:(k+1)*c*h], m.w.sin[k*c*h:(k+1)*c*h], m.split.chunk(k)*c, c, m.d.HS, m.cfg.Theta())
	}
}
