package model

import (
	"math"

	"trellis/ops"
)

// vocabLoss is the vocab-parallel cross-entropy (Megatron): each rank holds
// the logits of its V' vocabulary columns, (B·T, V'), of which the first vn
// are real (the rest, padding, get no probability). Without ever gathering
// the (B,T,V) logits, for each token n with target y_n:
//
//	M_n = max_ranks max_{v held} z[n,v]                 MaxOverTP
//	S_n = Σ_ranks Σ_{v held} exp(z[n,v] − M_n)           ReduceFromTP
//	Z_n = Σ_ranks z[n,y_n]·[y_n held]                    (the same call)
//	loss_n = log S_n + M_n − Z_n;  p[n,v] = exp(z[n,v] − M_n)/S_n
//
// logits may be s.probs: the probabilities overwrite them for the backward
// pass. Every rank returns the same mean loss.
func (m *GPT) vocabLoss(s *Stash, logits []float32, bt int) (float32, error) {
	d := m.d
	mx, st := m.tpws.ce[:bt], m.tpws.ce[bt:3*bt]
	sum, tgt := st[:bt], st[bt:]
	for i := 0; i < bt; i++ {
		row := logits[i*d.Vl : i*d.Vl+d.vn]
		mv := float32(-math.MaxFloat32)
		for _, z := range row {
			mv = max(mv, z)
		}
		mx[i] = mv
	}
	if err := m.tp.MaxOverTP(mx); err != nil {
		return 0, err
	}
	for i := 0; i < bt; i++ {
		row := logits[i*d.Vl : (i+1)*d.Vl]
		tgt[i] = 0
		if j := int(s.targets[i]) - d.vlo; j >= 0 && j < d.vn {
			tgt[i] = row[j] - mx[i] // Z_n − M_n, summed over the group below
		}
		var se float32
		for j := range row[:d.vn] {
			e := float32(math.Exp(float64(row[j] - mx[i])))
			row[j] = e
			se += e
		}
		clear(row[d.vn:]) // padding: no probability mass
		sum[i] = se
	}
	if err := m.tp.ReduceFromTP(st); err != nil {
		return 0, err
	}
	var total float64
	for i := 0; i < bt; i++ {
		logS := float32(math.Log(float64(sum[i])))
		s.losses[i] = logS - tgt[i]
		total += float64(s.losses[i])
		inv := 1 / sum[i]
		row := logits[i*d.Vl : i*d.Vl+d.vn]
		for j := range row {
			row[j] *= inv
		}
	}
	return float32(total / float64(bt)), nil
}

// vocabLossBackward sets dlogits = (p − onehot(y))·dloss/(B·T) for the
// rank's columns (0 on the padding).
func (m *GPT) vocabLossBackward(dlogits []float32, s *Stash, dloss float32, bt int) {
	d := m.d
	g := dloss / float32(bt)
	for i := 0; i < bt; i++ {
		dr, pr := dlogits[i*d.Vl:(i+1)*d.Vl], s.probs[i*d.Vl:(i+1)*d.Vl]
		for j := range dr {
			dr[j] = pr[j] * g
		}
		if j := int(s.targets[i]) - d.vlo; j >= 0 && j < d.vn {
			dr[j] -= g
		}
	}
}

// lnBackward is LayerNorm's backward over the rank's n tokens, dinp
// ACCUMULATED. With SP each rank sees only its tokens, so the parameter
// gradients of this micro-batch are summed over the group (ReduceFromTP)
// before they are added to dw, db.
func (m *GPT) lnBackward(dinp, dw, db, dout, inp, w, mean, rstd []float32, n int) error {
	C := m.d.C
	if !m.d.sp {
		ops.LayerNormBackward(m.k, dinp, dw, db, dout, inp, w, mean, rstd, n, C)
		return nil
	}
	g := m.tpws.lnGrad
	clear(g)
	ops.LayerNormBackward(m.k, dinp, g[:C], g[C:], dout, inp, w, mean, rstd, n, C)
	if err := m.tp.ReduceFromTP(g); err != nil {
		return err
	}
	ops.AddInto(m.k, dw, g[:C], C)
	ops.AddInto(m.k, db, g[C:], C)
	return nil
}
