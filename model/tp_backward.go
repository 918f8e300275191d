package model

import "trellis/ops"

// The backward pass of a tensor-parallel rank: the conjugates of the
// forward's meeting points. g's backward is the identity (GatherSeq with
// SP): the gradient of a row-parallel layer's output is replicated. f's
// backward is ReduceFromTP (ScatterSeq with SP): the gradient of a
// column-parallel layer's input is the sum of every rank's partial one; it
// runs while the layer's weight gradient is computed (colBackward).

// leaveRowBack is g's backward: the full (B·T, C) gradient of a
// row-parallel layer's output from the rank's tokens of it.
func (m *GPT) leaveRowBack(local []float32, bt int) ([]float32, error) {
	if !m.d.sp {
		return local, nil
	}
	full := m.tpws.gath[:bt*m.d.C]
	return full, m.tp.GatherSeq(full, local)
}

// colBackward is a column-parallel layer's backward with f's: it sets
// m.dln to the partial input gradient dout·w (B·T, C), starts its sum over
// the group (f's backward), ACCUMULATES the weight and bias gradients
// while the reduction runs, and returns the rank's tokens of the summed
// input gradient:
//
//	dz = f*(dout·w);  dw += doutᵀ·inp;  db += Σ_rows dout
//
// inp (B·T, C), w (OC, C), dout (B·T, OC).
func (m *GPT) colBackward(dw, db, dout, inp, w []float32, bt, OC int) ([]float32, error) {
	C := m.d.C
	m.linearInputGrad(m.dln[:bt*C], dout, w, bt, C, OC)
	dz, wait := m.startColReduce(bt)
	m.linearWeightGrad(dw, dout, inp, bt, C, OC)
	if db != nil {
		ops.BiasBackward(m.k, db, dout, bt, OC)
	}
	return dz, wait()
}

// startColReduce starts f's backward on the partial input gradient in
// m.dln (B·T, C) and returns where the rank's tokens of the sum will be,
// with the function that waits for it.
func (m *GPT) startColReduce(bt int) ([]float32, func() error) {
	C := m.d.C
	if !m.d.sp {
		dz := m.dln[:bt*C]
		return dz, m.tp.StartReduceFromTP(dz)
	}
	dz := m.tpws.dlnl[:m.d.tokens(bt)*C]
	return dz, m.tp.StartScatterSeq(dz, m.dln[:bt*C])
}

// headBackwardTP is HeadBackward for a split part: the vocab-parallel
// loss's gradient into the rank's wte rows and, through f, into LN_f.
func (m *GPT) headBackwardTP(p Params, s *Stash, dloss float32) error {
	d := m.d
	C, bt := d.C, s.b*s.t
	n := d.tokens(bt)
	w, err := m.weights(p, 0, false)
	if err != nil {
		return err
	}
	g, err := grads(p, 0)
	if err != nil {
		m.release(p, 0)
		return err
	}
	dlogits := m.big[:bt*d.Vl]
	m.vocabLossBackward(dlogits, s, dloss, bt)
	dz, err := m.headColBackward(g[:d.Vl*C], dlogits, s, w[:d.Vl*C], bt)
	m.release(p, 0)
	if err != nil {
		return err
	}
	u := m.cfg.Layers + 1
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
	if err := m.lnBackward(m.dres[:n*C], g[:C], g[C:2*C], dz, s.res[m.cfg.Layers][:n*C], gain, s.lnfM, s.lnfR, n); err != nil {
		return err
	}
	return gradsDone(p, u)
}

// headColBackward is the LM head's colBackward: dwte_r += dlogitsᵀ·lnf
// and the rank's tokens of f*(dlogits·wte_r), lnf gathered again with SP
// (16-bit with a 16-bit stash).
func (m *GPT) headColBackward(dw, dlogits []float32, s *Stash, w []float32, bt int) ([]float32, error) {
	d := m.d
	n := d.tokens(bt)
	if d.half {
		x, err := m.enterColH(s.lnfh[:n*d.C], bt)
		if err != nil {
			return nil, err
		}
		return m.colBackwardH(dw, nil, dlogits, x, w, bt, d.Vl)
	}
	z, err := m.enterCol(s.lnf[:n*d.C], bt)
	if err != nil {
		return nil, err
	}
	return m.colBackward(dw, nil, dlogits, z, w, bt, d.Vl)
}

// blockBackwardTP is BlockBackward's math for a split part, on the
// block's weights w and gradients g.
func (m *GPT) blockBackwardTP(w, g []float32, s *Stash, l int) error {
	if m.d.half {
		return m.blockBackwardTPHalf(w, g, s, l)
	}
	d, k := m.d, m.k
	B, T, C := s.b, s.t, d.C
	bt := B * T
	n := d.tokens(bt)
	v, dv, a := viewBlockPart(w, C, d.t), viewBlockPart(g, C, d.t), &s.layers[l]
	dres := m.dres[:n*C]

	// MLP: out = res2 + drop(g(fcg_r·W_fc2,rᵀ) + b), fcg_r = GELU(f(ln2)·W_fc,rᵀ + b_r).
	dfcg, dfc := m.big[:bt*d.F], m.big[bt*d.F:2*bt*d.F]
	dy, err := m.leaveRowBack(m.branchGrad(s, m.drop.mlp[l]), bt)
	if err != nil {
		return err
	}
	m.linearBackwardSet(dfcg, dv.fc2w, dv.fc2b, dy, a.fcg, v.fc2w, bt, d.F, C)
	ops.GELUBackwardSet(k, dfc, a.fc, dfcg, bt*d.F)
	z, err := m.enterCol(a.ln2[:n*C], bt)
	if err != nil {
		return err
	}
	dz, err := m.colBackward(dv.fcw, dv.fcb, dfc, z, v.fcw, bt, d.F)
	if err != nil {
		return err
	}
	if err := m.lnBackward(dres, dv.ln2w, dv.ln2b, dz, a.res2[:n*C], v.ln2w, a.ln2M, a.ln2R, n); err != nil {
		return err
	}

	// Attention: res2 = x + drop(g(atty_r·W_proj,rᵀ) + b), qkv_r = f(ln1)·W_qkv,rᵀ + b_r.
	dqkv, datty := m.big[:3*bt*d.Cl], m.big[bt*d.F:bt*d.F+bt*d.Cl]
	if dy, err = m.leaveRowBack(m.branchGrad(s, m.drop.attn[l]), bt); err != nil {
		return err
	}
	m.linearBackwardSet(datty, dv.projw, dv.projb, dy, a.atty, v.projw, bt, d.Cl, C)
	m.attnBackward(dqkv, datty, a, B, T, d.Cl, d.NH)
	if z, err = m.enterCol(a.ln1[:n*C], bt); err != nil {
		return err
	}
	if dz, err = m.colBackward(dv.qkvw, dv.qkvb, dqkv, z, v.qkvw, bt, 3*d.Cl); err != nil {
		return err
	}
	return m.lnBackward(dres, dv.ln1w, dv.ln1b, dz, s.res[l][:n*C], v.ln1w, a.ln1M, a.ln1R, n)
}

// embedBackwardTP is EmbedBackward for a split part: the full gradient of
// the lookup (gathered with SP) into the rank's wte rows and into wpe.
func (m *GPT) embedBackwardTP(g []float32, s *Stash) error {
	d := m.d
	C, bt := d.C, s.b*s.t
	dh, err := m.leaveRowBack(m.branchGrad(s, m.drop.embd), bt)
	if err != nil {
		return err
	}
	dwte, dwpe := g[:d.Vl*C], g[d.Vl*C:]
	for i, id := range s.inputs[:bt] {
		dr := dh[i*C : (i+1)*C]
		pos := i % s.t
		ops.AddInto(m.k, dwpe[pos*C:(pos+1)*C], dr, C)
		if j := int(id) - d.vlo; j >= 0 && j < d.vn {
			ops.AddInto(m.k, dwte[j*C:(j+1)*C], dr, C)
		}
	}
	return nil
}
