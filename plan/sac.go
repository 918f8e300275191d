package plan

// torchtitan's per-op selective activation checkpointing (Software.OpSAC:
// selective_ac_option = "op", torchtitan/distributed/activation_checkpoint.py
// with each model's _op_sac_save_list). Every transformer block is
// checkpointed; its backward keeps what the policy saves and recomputes the
// rest:
//
//	saved      the block's input; the output of every other aten.mm in
//	           forward order (the 1st, 3rd, …: "Saves output of all compute
//	           ops, except every second mm"); the attention kernel's output
//	           and log-sum-exp (flash, efficient and flex attention are on
//	           the list); the outputs of all_to_all_single (the
//	           expert-parallel dispatch and combine) and of reduce_scatter
//	recomputed everything else: norms, rotary, activations, the router's
//	           scores, the token permutations, and the routed experts'
//	           grouped GEMMs (torch._grouped_mm is not on the list)
//
// The mm's of one block in torchtitan's forward order are, for
// grouped-query attention wq, wk, wv, wo; for multi-head latent attention
// wq (or wq_a, wq_b), wkv_a, wkv_b, wo; for a dense MLP w1, w3, w2; for an
// MoE layer the router's gate, then (after the routed experts) the shared
// experts' w1, w3, w2. A column-parallel output is split by tp, a
// row-parallel one too under sp (its reduce-scatter's output) and whole
// without. The recomputation reruns the block's forward but the saved
// GEMMs (half of the attention and MLP GEMMs' forward time) and the
// attention core.

// opSACKept is the bytes a block of the kind keeps for one micro-batch
// under the per-op policy (R: the routed token copies the rank receives).
func (r *recipe) opSACKept(moe bool, R float64) float64 {
	m := r.j.Model
	h, a, t, e := float64(m.Hidden), float64(m.Heads), r.t, r.k.e
	rowOut := h
	seqSplit := 1.0
	if r.p.SP {
		rowOut, seqSplit = h/t, t
	}
	var outs []float64 // each mm's output width per token, forward order
	var dv float64     // the attention output's width per head
	if m.mla() {
		x := m.latent()
		qk := float64(x.QKNope + x.QKRope)
		if x.QRank > 0 {
			outs = append(outs, float64(x.QRank), a*qk/t)
		} else {
			outs = append(outs, a*qk/t)
		}
		outs = append(outs, float64(x.KVRank+x.QKRope), a*float64(x.QKNope+x.V)/t, rowOut)
		dv = float64(x.V)
	} else {
		d, kv := float64(m.HD()), float64(m.KVHeads)
		outs = append(outs, a*d/t, kv*d/t, kv*d/t, rowOut)
		dv = d
	}
	f := float64(m.FFN)
	if moe {
		x := m.experts()
		outs = append(outs, float64(x.Experts))
		f = float64(x.SharedFFN)
	}
	if f > 0 {
		outs = append(outs, f/t, f/t, rowOut)
	}
	perToken := h / seqSplit // the block's input
	for i, w := range outs {
		if i%2 == 0 { // the 1st, 3rd, … mm
			perToken += w
		}
	}
	kept := r.T * (perToken*e + a/t*(dv*e+4))
	if ep, _ := r.p.Experts(); moe && ep > 1 {
		n, K := r.routedTokens(), float64(m.MoE.TopK)
		kept += (R + K*n) * h * e // the dispatch's and the combine's outputs
	}
	return kept
}

// opSACSaved is the forward time the per-op policy does not recompute:
// the attention core and, of the attention and MLP GEMMs, every other one
// (half their forward time).
func opSACSaved(pairs []tpPair, core passTime) float64 {
	g := 0.0
	for _, q := range pairs {
		g += q.col.fwd + q.row.fwd
	}
	return core.fwd + g/2
}
