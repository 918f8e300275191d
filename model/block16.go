package model

import "trellis/ops"

// The passes of a block over a 16-bit stash (stash16.go), t = 1. The fp32
// intermediates live in the big scratch buffer, which no other pass holds
// across a call: in the forward, y = big[:4·BTC] (a GEMM's output: qkv or
// fc, then GELU(fc)) and z = big[4·BTC:5·BTC] (a LayerNorm's output, then
// atty); in the backward, the MLP's dfcg = big[:4·BTC] and dfc =
// big[4·BTC:8·BTC] (fc decoded into it, then GELU's gradient in place),
// then attention's dqkv = big[:3·BTC], o = big[3·BTC:4·BTC] (atty decoded
// for flash, or the selective recomputation's discarded output), datty =
// big[4·BTC:5·BTC] and q = big[5·BTC:8·BTC] (qkv decoded).

// blockForwardHalf is blockForward over a 16-bit stash:
//
//	ln1 = r(LN₁(x)); qkv = r(ln1·Wqkvᵀ + b); atty = r(Attn(qkv))
//	res2 = x + drop(atty·Wprojᵀ + b)
//	ln2 = r(LN₂(res2)); fc = r(ln2·Wfcᵀ + b); fcg = r(GELU(fc))
//	out = res2 + drop(fcg·Wfc2ᵀ + b)
//
// with r the rounding to 16-bit (what the stash keeps), the GEMMs in
// 16-bit with fp32 accumulation, every weight rounded (weights16.go) and
// everything else in fp32.
func (m *GPT) blockForwardHalf(w []float32, s *Stash, l int) {
	c, k := m.cfg, m.k
	B, T, C := s.b, s.t, c.Hidden
	BT, BTC := B*T, B*T*C
	v, a := m.halfBlockView(w), &s.layers[l]
	x, out := s.res[l][:BTC], s.res[l+1][:BTC]
	y, z := m.big[:4*BTC], m.big[4*BTC:5*BTC]
	ops.LayerNormForward(k, z, a.ln1M, a.ln1R, x, v.ln1w, v.ln1b, BT, C)
	m.encode(a.ln1h, z)
	qkv := y[:3*BTC]
	m.linearForwardH(qkv, nil, a.ln1h, v.qkvw, v.qkvb, BT, C, 3*C)
	m.round(a.qkvh, qkv)
	m.attnCore(z, a.att, qkv, B, T, C, c.Heads)
	m.encode(a.attyh, z)
	m.residualBranchH(s, a.res2, x, a.attyh, v.projw, v.projb, C, l, false)
	ops.LayerNormForward(k, z, a.ln2M, a.ln2R, a.res2, v.ln2w, v.ln2b, BT, C)
	m.encode(a.ln2h, z)
	m.linearForwardH(y, nil, a.ln2h, v.fcw, v.fcb, BT, C, 4*C)
	m.round(a.fch, y)
	ops.GELUForward(k, y, y, 4*BTC) // element-wise, in place
	m.encode(a.fcgh, y)
	m.residualBranchH(s, out, a.res2, a.fcgh, v.fc2w, v.fc2b, 4*C, l, true)
}

// residualBranchH is residualBranch with a 16-bit input x.
func (m *GPT) residualBranchH(s *Stash, out, res []float32, x []uint16, w, b []float32, in, l int, mlp bool) {
	BT, C := s.b*s.t, m.cfg.Hidden
	if !m.useDropout(s) {
		m.linearForwardH(out, res, x, w, b, BT, in, C)
		return
	}
	site := m.drop.attn[l]
	if mlp {
		site = m.drop.mlp[l]
	}
	br := m.branch[:BT*C]
	m.linearForwardH(br, nil, x, w, b, BT, in, C)
	m.dropoutAt(s, site).Forward(m.k, br, br, BT*C)
	ops.ResidualForward(m.k, out, res, br, BT*C)
}

// blockBackwardHalf is BlockBackward's gradient over a 16-bit stash, with
// block l's weights w and gradients g (after any full recomputation;
// selective recomputation reruns the attention core here, from the
// decoded qkv, since the MLP's gradients use its scratch first).
func (m *GPT) blockBackwardHalf(w, g []float32, s *Stash, l int) {
	c, k := m.cfg, m.k
	B, T, C := s.b, s.t, c.Hidden
	BT, BTC := B*T, B*T*C
	v, dv, a := m.halfBlockView(w), viewBlock(g, C), &s.layers[l]

	dfcg, dfc := m.big[:4*BTC], m.big[4*BTC:8*BTC]
	dbr := m.branchGrad(s, m.drop.mlp[l])
	m.linearBackwardSetH(dfcg, dv.fc2w, dv.fc2b, dbr, a.fcgh, v.fc2w, BT, 4*C, C)
	m.decode(dfc, a.fch[:4*BTC])
	ops.GELUBackwardSet(k, dfc, dfc, dfcg, 4*BTC) // element-wise, in place: dfc = GELU'(fc)·dfcg
	m.linearBackwardSetH(m.dln, dv.fcw, dv.fcb, dfc, a.ln2h, v.fcw, BT, C, 4*C)
	ops.LayerNormBackward(k, m.dres, dv.ln2w, dv.ln2b, m.dln, a.res2, v.ln2w, a.ln2M, a.ln2R, BT, C)

	dqkv, o, datty, q := m.big[:3*BTC], m.big[3*BTC:4*BTC], m.big[4*BTC:5*BTC], m.big[5*BTC:8*BTC]
	dbr = m.branchGrad(s, m.drop.attn[l])
	m.linearBackwardSetH(datty, dv.projw, dv.projb, dbr, a.attyh, v.projw, BT, C, C)
	m.attnBackward16(dqkv, datty, q, o, a, B, T, C, c.Heads)
	m.linearBackwardSetH(m.dln, dv.qkvw, dv.qkvb, dqkv, a.ln1h, v.qkvw, BT, C, 3*C)
	ops.LayerNormBackward(k, m.dres, dv.ln1w, dv.ln1b, m.dln, s.res[l], v.ln1w, a.ln1M, a.ln1R, BT, C)
}

// blockBackwardInputHalf is BlockBackwardInput over a 16-bit stash: the
// MLP and attention gradients of blockBackwardHalf, with each linear's
// output gradient dY kept in d (fp32) and its weight gradient left to
// blockBackwardWeightHalf; fc is widened into d.fc, where GELU's gradient
// replaces it.
func (m *GPT) blockBackwardInputHalf(w, g []float32, s *Stash, d *blockDouts, l int) {
	c, k := m.cfg, m.k
	B, T, C := s.b, s.t, c.Hidden
	BT, BTC := B*T, B*T*C
	v, dv, a := m.halfBlockView(w), viewBlock(g, C), &s.layers[l]

	dfcg := m.big[:4*BTC]
	copy(d.fc2, m.branchGrad(s, m.drop.mlp[l]))
	m.gemmDX(dfcg, d.fc2, v.fc2w, BT, 4*C, C)
	ops.BiasBackward(k, dv.fc2b, d.fc2, BT, C)
	m.decode(d.fc, a.fch[:4*BTC])
	ops.GELUBackwardSet(k, d.fc, d.fc, dfcg, 4*BTC)
	m.gemmDX(m.dln, d.fc, v.fcw, BT, C, 4*C)
	ops.BiasBackward(k, dv.fcb, d.fc, BT, 4*C)
	ops.LayerNormBackward(k, m.dres, dv.ln2w, dv.ln2b, m.dln, a.res2, v.ln2w, a.ln2M, a.ln2R, BT, C)

	o, datty, q := m.big[3*BTC:4*BTC], m.big[4*BTC:5*BTC], m.big[5*BTC:8*BTC]
	copy(d.proj, m.branchGrad(s, m.drop.attn[l]))
	m.gemmDX(datty, d.proj, v.projw, BT, C, C)
	ops.BiasBackward(k, dv.projb, d.proj, BT, C)
	m.attnBackward16(d.qkv, datty, q, o, a, B, T, C, c.Heads)
	m.gemmDX(m.dln, d.qkv, v.qkvw, BT, C, 3*C)
	ops.BiasBackward(k, dv.qkvb, d.qkv, BT, 3*C)
	ops.LayerNormBackward(k, m.dres, dv.ln1w, dv.ln1b, m.dln, s.res[l], v.ln1w, a.ln1M, a.ln1R, BT, C)
}

// blockBackwardWeightHalf is BlockBackwardWeight over a 16-bit stash:
// dW += r(dY)ᵀ·X with X the stash's 16-bit inputs.
func (m *GPT) blockBackwardWeightHalf(g []float32, s *Stash, d *blockDouts, l int) {
	C := m.cfg.Hidden
	BT := s.b * s.t
	dv, a := viewBlock(g, C), &s.layers[l]
	m.gemmDW(dv.fc2w, d.fc2, a.fcgh, BT, 4*C, C)
	m.gemmDW(dv.fcw, d.fc, a.ln2h, BT, C, 4*C)
	m.gemmDW(dv.projw, d.proj, a.attyh, BT, C, C)
	m.gemmDW(dv.qkvw, d.qkv, a.ln1h, BT, C, 3*C)
}

// gemmDX sets dinp = r(dout)·w̃, a linear layer's input gradient.
func (m *GPT) gemmDX(dinp, dout, w []float32, N, C, OC int) {
	dy := m.half.dy[:N*OC]
	m.encode(dy, dout[:N*OC])
	m.halfGEMMs(dinp, nil, dy, nil, w, N, C, OC)
}

// gemmDW accumulates dw += r(dout)ᵀ·x, a linear layer's weight gradient.
func (m *GPT) gemmDW(dw, dout []float32, x []uint16, N, C, OC int) {
	dy := m.half.dy[:N*OC]
	m.encode(dy, dout[:N*OC])
	m.halfGEMMs(nil, dw, dy, x, nil, N, C, OC)
}

// attnBackward16 is the attention core's backward over a 16-bit stash,
// for B·T tokens of Cl = NH·head-size columns (a tensor-parallel rank's
// heads): q receives the q, k, v widened from the stash's qkv; o the
// recomputed core output when selective recomputation shares the
// probabilities (attnCore), or flash's output widened from atty; then
// attnCoreBackward writes dqkv from datty.
func (m *GPT) attnBackward16(dqkv, datty, q, o []float32, a *layerActs, B, T, Cl, NH int) {
	X := B * T * Cl
	m.decode(q, a.qkvh[:3*X])
	switch {
	case m.d.shareAtt():
		m.attnCore(o, a.att, q, B, T, Cl, NH)
	case m.flash:
		m.decode(o, a.attyh[:X])
	}
	m.attnCoreBackward(dqkv, datty, q, o, a.att, B, T, Cl, NH)
}
