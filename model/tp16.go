package model

import (
	"trellis/ops"
	"trellis/rng"
)

// The passes of a tensor-parallel rank over a 16-bit stash (stash16.go):
// the whole layer's 16-bit math (block16.go, weights16.go) on the rank's
// slices. ln1, ln2 and lnf (the rank's n tokens), qkv, atty, fc and
// GELU(fc) (its columns) are stored in the compute dtype, qkv and fc
// rounded once with the forward going on from the rounded values, and
// every weight read is its rounding: the matrices through the compute
// copy, the block's vectors through halfBlockView, the embedding rows
// through embedForwardTP. So each rank computes, element for element, the
// values one device computes for its columns; what differs is only where
// the fp32 sums meet (the row-parallel reduction, then the rounded bias;
// the column-parallel input gradient's reduction), fp32 reduction order.
//
// Scratch: the forward's LayerNorm output z = big[:nC] (rounded into the
// stash, then gathered with SP), qkv = big[:3X] and the attention output
// big[3X:4X] (X = B·T·C'), fc and GELU(fc) in place in big[:B·T·F]; the
// backward's dfcg = big[:B·T·F], dfc = big[B·T·F:2·B·T·F], then
// dqkv = big[:3X], o = big[3X:4X], datty = big[4X:5X], q = big[5X:8X]
// (8X = 2·B·T·F, within big).

// enterColH is f's forward on a 16-bit LayerNorm output: the full
// (B·T, C) 16-bit input of a column-parallel layer from the rank's n
// tokens h. With SP, h is widened (exactly) into the dlnl scratch,
// gathered in fp32 and rounded into the x scratch, which reproduces its
// bits.
func (m *GPT) enterColH(h []uint16, bt int) ([]uint16, error) {
	if !m.d.sp {
		return h, nil
	}
	C := m.d.C
	local, full, x := m.tpws.dlnl[:len(h)], m.tpws.gath[:bt*C], m.half.x[:bt*C]
	m.decode(local, h)
	if err := m.tp.GatherSeq(full, local); err != nil {
		return nil, err
	}
	m.encode(x, full)
	return x, nil
}

// blockForwardTPHalf is blockForwardHalf for a split part:
//
//	ln1 = r(LN₁(h)); qkv_r = r(f(ln1)·W_qkv,rᵀ + b_r); atty_r = r(Attn(qkv_r))
//	res2 = h + drop(g(atty_r·W_proj,rᵀ) + b_proj)
//	ln2 = r(LN₂(res2)); fc_r = r(f(ln2)·W_fc,rᵀ + b_r); fcg_r = r(GELU(fc_r))
//	out = res2 + drop(g(fcg_r·W_fc2,rᵀ) + b_fc2)
func (m *GPT) blockForwardTPHalf(w []float32, s *Stash, l int) error {
	d, k := m.d, m.k
	B, T, C := s.b, s.t, d.C
	bt := B * T
	n, X := d.tokens(bt), bt*d.Cl
	v, a := m.halfBlockView(w), &s.layers[l]
	x, out := s.res[l][:n*C], s.res[l+1][:n*C]
	z := m.big[:n*C]
	ops.LayerNormForward(k, z, a.ln1M, a.ln1R, x, v.ln1w, v.ln1b, n, C)
	m.encode(a.ln1h, z)
	in, err := m.enterColH(a.ln1h[:n*C], bt)
	if err != nil {
		return err
	}
	qkv, o := m.big[:3*X], m.big[3*X:4*X]
	m.linearForwardH(qkv, nil, in, v.qkvw, v.qkvb, bt, C, 3*d.Cl)
	m.round(a.qkvh, qkv)
	m.attnCore(o, a.att, qkv, B, T, d.Cl, d.NH)
	m.encode(a.attyh, o)
	if err := m.rowBranchH(s, a.res2[:n*C], x, a.attyh, v.projw, v.projb, d.Cl, m.drop.attn[l]); err != nil {
		return err
	}
	ops.LayerNormForward(k, z, a.ln2M, a.ln2R, a.res2[:n*C], v.ln2w, v.ln2b, n, C)
	m.encode(a.ln2h, z)
	if in, err = m.enterColH(a.ln2h[:n*C], bt); err != nil {
		return err
	}
	fc := m.big[:bt*d.F]
	m.linearForwardH(fc, nil, in, v.fcw, v.fcb, bt, C, d.F)
	m.round(a.fch, fc)
	ops.GELUForward(k, fc, fc, bt*d.F) // element-wise, in place
	m.encode(a.fcgh, fc)
	return m.rowBranchH(s, out, a.res2[:n*C], a.fcgh, v.fc2w, v.fc2b, d.F, m.drop.mlp[l])
}

// rowBranchH is rowBranch with a 16-bit input x (in columns on this rank).
func (m *GPT) rowBranchH(s *Stash, out, res []float32, x []uint16, w, b []float32, in int, site rng.Stream) error {
	bt, C := s.b*s.t, m.d.C
	part := m.big[:bt*C]
	m.linearForwardH(part, nil, x, w, nil, bt, in, C)
	return m.leaveRowBias(s, out, res, part, b, site)
}

// colBackwardH is colBackward with the layer's input x in 16-bit: dout is
// rounded once into the dy scratch, which both GEMMs read.
func (m *GPT) colBackwardH(dw, db, dout []float32, x []uint16, w []float32, bt, OC int) ([]float32, error) {
	C := m.d.C
	dy := m.half.dy[:bt*OC]
	m.encode(dy, dout[:bt*OC])
	m.halfGEMMs(m.dln[:bt*C], nil, dy, nil, w, bt, C, OC)
	dz, wait := m.startColReduce(bt)
	m.halfGEMMs(nil, dw, dy, x, nil, bt, C, OC)
	if db != nil {
		ops.BiasBackward(m.k, db, dout, bt, OC)
	}
	return dz, wait()
}

// blockBackwardTPHalf is blockBackwardHalf for a split part (after any
// full recomputation; selective reruns the attention core from the
// decoded qkv here).
func (m *GPT) blockBackwardTPHalf(w, g []float32, s *Stash, l int) error {
	d, k := m.d, m.k
	B, T, C := s.b, s.t, d.C
	bt := B * T
	n, X := d.tokens(bt), bt*d.Cl
	v, dv, a := m.halfBlockView(w), viewBlockPart(g, C, d.t), &s.layers[l]
	dres := m.dres[:n*C]

	dfcg, dfc := m.big[:bt*d.F], m.big[bt*d.F:2*bt*d.F]
	dy, err := m.leaveRowBack(m.branchGrad(s, m.drop.mlp[l]), bt)
	if err != nil {
		return err
	}
	m.linearBackwardSetH(dfcg, dv.fc2w, dv.fc2b, dy, a.fcgh, v.fc2w, bt, d.F, C)
	m.decode(dfc, a.fch[:bt*d.F])
	ops.GELUBackwardSet(k, dfc, dfc, dfcg, bt*d.F) // element-wise, in place
	in, err := m.enterColH(a.ln2h[:n*C], bt)
	if err != nil {
		return err
	}
	dz, err := m.colBackwardH(dv.fcw, dv.fcb, dfc, in, v.fcw, bt, d.F)
	if err != nil {
		return err
	}
	if err := m.lnBackward(dres, dv.ln2w, dv.ln2b, dz, a.res2[:n*C], v.ln2w, a.ln2M, a.ln2R, n); err != nil {
		return err
	}

	dqkv, o, datty, q := m.big[:3*X], m.big[3*X:4*X], m.big[4*X:5*X], m.big[5*X:8*X]
	if dy, err = m.leaveRowBack(m.branchGrad(s, m.drop.attn[l]), bt); err != nil {
		return err
	}
	m.linearBackwardSetH(datty, dv.projw, dv.projb, dy, a.attyh, v.projw, bt, d.Cl, C)
	m.attnBackward16(dqkv, datty, q, o, a, B, T, d.Cl, d.NH)
	if in, err = m.enterColH(a.ln1h[:n*C], bt); err != nil {
		return err
	}
	if dz, err = m.colBackwardH(dv.qkvw, dv.qkvb, dqkv, in, v.qkvw, bt, 3*d.Cl); err != nil {
		return err
	}
	return m.lnBackward(dres, dv.ln1w, dv.ln1b, dz, s.res[l][:n*C], v.ln1w, a.ln1M, a.ln1R, n)
}
