package model

import (
	"trellis/ops"
	"trellis/rng"
)

// The forward pass of a tensor-parallel rank (Part.Split). Its math is the
// single device's; what differs is which part of each product the rank
// computes and where it meets the group (see TPComm):
//
//	h₀     = drop(Σ_ranks wte_r[x]·[x held by r] + wpe)    vocab-parallel lookup
//	block: z = f(LN₁(h));  qkv_r = z·W_qkv,rᵀ + b_r        column-parallel, NH/t heads
//	       h = h + drop(g(atty_r·W_proj,rᵀ) + b_proj)       row-parallel, bias after g
//	       z = f(LN₂(h));  u_r = GELU(z·W_fc,rᵀ + b_r)      column-parallel
//	       h = h + drop(g(u_r·W_fc2,rᵀ) + b_fc2)            row-parallel
//	loss   = vocab-parallel cross-entropy of f(LN_f(h))·wte_rᵀ
//
// f is the identity (GatherSeq with SP), g is ReduceFromTP (ScatterSeq).
// Under mixed precision the rank runs the whole layer's 16-bit math on its
// part, over a 16-bit stash (tp16.go); the reductions, LayerNorm, softmax
// and the loss stay fp32.

// enterCol is f's forward: the full (B·T, C) input of a column-parallel
// layer from the rank's LayerNorm output local (its n tokens).
func (m *GPT) enterCol(local []float32, bt int) ([]float32, error) {
	if !m.d.sp {
		return local, nil
	}
	full := m.tpws.gath[:bt*m.d.C]
	return full, m.tp.GatherSeq(full, local)
}

// leaveRow is g's forward: the rank's tokens of Σ_ranks partial, the
// (B·T, C) partial outputs of a row-parallel layer (reduced in place, or
// scattered into the branch buffer with SP).
func (m *GPT) leaveRow(partial []float32, bt int) ([]float32, error) {
	if !m.d.sp {
		return partial, m.tp.ReduceFromTP(partial)
	}
	local := m.branch[:m.d.tokens(bt)*m.d.C]
	return local, m.tp.ScatterSeq(local, partial)
}

// firstToken is the index, in the pass's flattened B·T tokens, of the
// rank's first token in the LayerNorm and residual regions.
func (m *GPT) firstToken(bt int) int {
	if !m.d.sp {
		return 0
	}
	return m.d.r * bt / m.d.t
}

// embedForwardTP is EmbedForward for a split part: each rank looks up the
// ids whose rows it holds (zero rows for the others, so the sum over the
// group is exactly wte[x]), then the positions are added.
func (m *GPT) embedForwardTP(w []float32, s *Stash) error {
	d := m.d
	C, bt := d.C, s.b*s.t
	wte, wpe := w[:d.Vl*C], w[d.Vl*C:]
	part := m.big[:bt*C]
	lookupRows(part, s.inputs[:bt], wte, d.vlo, d.vn, C)
	r := func(x float32) float32 { return x }
	if d.half { // r(wte[x]) + r(wpe[t]), as embedForwardHalf; r(0) = 0
		m.round(m.half.dy[:bt*C], part)
		r = m.rounder()
	}
	h, err := m.leaveRow(part, bt)
	if err != nil {
		return err
	}
	n, first := d.tokens(bt), m.firstToken(bt)
	out := s.res[0][:n*C]
	for i := 0; i < n; i++ {
		pos := (first + i) % s.t
		o, e, p := out[i*C:(i+1)*C], h[i*C:(i+1)*C], wpe[pos*C:(pos+1)*C]
		for j := range o {
			o[j] = e[j] + r(p[j])
		}
	}
	if m.useDropout(s) {
		m.dropoutAt(s, m.drop.embd).Forward(m.k, out, out, n*C)
	}
	return nil
}

// lookupRows sets out[i] = wte[ids[i]−lo] for the ids in [lo, lo+n) and 0
// for the others (held by other ranks).
func lookupRows(out []float32, ids []int32, wte []float32, lo, n, C int) {
	for i, id := range ids {
		o := out[i*C : (i+1)*C]
		if j := int(id) - lo; j >= 0 && j < n {
			copy(o, wte[j*C:(j+1)*C])
		} else {
			clear(o)
		}
	}
}

// blockForwardTP is BlockForward for a split part.
func (m *GPT) blockForwardTP(w []float32, s *Stash, l int) error {
	if m.d.half {
		return m.blockForwardTPHalf(w, s, l)
	}
	d, k := m.d, m.k
	B, T, C := s.b, s.t, d.C
	bt := B * T
	n := d.tokens(bt)
	v, a := viewBlockPart(w, C, d.t), &s.layers[l]
	x, out := s.res[l][:n*C], s.res[l+1][:n*C]
	ops.LayerNormForward(k, a.ln1[:n*C], a.ln1M, a.ln1R, x, v.ln1w, v.ln1b, n, C)
	z, err := m.enterCol(a.ln1[:n*C], bt)
	if err != nil {
		return err
	}
	m.linearForward(a.qkv, nil, z, v.qkvw, v.qkvb, bt, C, 3*d.Cl)
	m.attnForward(a, B, T, d.Cl, d.NH)
	if err := m.rowBranch(s, a.res2[:n*C], x, a.atty, v.projw, v.projb, d.Cl, m.drop.attn[l]); err != nil {
		return err
	}
	ops.LayerNormForward(k, a.ln2[:n*C], a.ln2M, a.ln2R, a.res2[:n*C], v.ln2w, v.ln2b, n, C)
	if z, err = m.enterCol(a.ln2[:n*C], bt); err != nil {
		return err
	}
	m.linearForward(a.fc, nil, z, v.fcw, v.fcb, bt, C, d.F)
	ops.GELUForward(k, a.fcg, a.fc, bt*d.F)
	return m.rowBranch(s, out, a.res2[:n*C], a.fcg, v.fc2w, v.fc2b, d.F, m.drop.mlp[l])
}

// rowBranch is out = res + drop(g(inp·wᵀ) + b) for a row-parallel layer
// with in input columns on this rank (the bias added once, after g).
func (m *GPT) rowBranch(s *Stash, out, res, inp, w, b []float32, in int, site rng.Stream) error {
	bt, C := s.b*s.t, m.d.C
	part := m.big[:bt*C]
	m.linearForward(part, nil, inp, w, nil, bt, in, C)
	return m.leaveRowBias(s, out, res, part, b, site)
}

// leaveRowBias is the end of a row-parallel branch from the rank's
// (B·T, C) partial products: out = res + drop(g(part) + b).
func (m *GPT) leaveRowBias(s *Stash, out, res, part, b []float32, site rng.Stream) error {
	bt, C := s.b*s.t, m.d.C
	y, err := m.leaveRow(part, bt)
	if err != nil {
		return err
	}
	n := m.d.tokens(bt)
	ops.BiasForward(m.k, y, y, b, n, C)
	if m.useDropout(s) {
		m.dropoutAt(s, site).Forward(m.k, y, y, n*C)
	}
	ops.ResidualForward(m.k, out, res, y, n*C)
	return nil
}

// headForwardTP is HeadForward's LM head for a split part: the rank's V'
// columns of the logits, and the vocab-parallel loss.
func (m *GPT) headForwardTP(w []float32, s *Stash) (float32, error) {
	d := m.d
	bt := s.b * s.t
	logits := s.probs[:bt*d.Vl]
	if d.half {
		x, err := m.enterColH(s.lnfh[:d.tokens(bt)*d.C], bt)
		if err != nil {
			return 0, err
		}
		m.linearForwardH(logits, nil, x, w[:d.Vl*d.C], nil, bt, d.C, d.Vl)
		return m.vocabLoss(s, logits, bt)
	}
	z, err := m.enterCol(s.lnf[:d.tokens(bt)*d.C], bt)
	if err != nil {
		return 0, err
	}
	m.k.MatMul(ops.NT, bt, d.Vl, d.C, z, d.C, w[:d.Vl*d.C], d.C, logits, d.Vl, false)
	return m.vocabLoss(s, logits, bt)
}
