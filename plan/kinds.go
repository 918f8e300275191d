package plan

import "math"

// A layer kind of the general path: dense or MoE, full or sliding-window
// attention. kindCost is one layer of a kind for one micro-batch on one
// device; the pipeline composes them (general.go).
type kindCost struct {
	compute passTime // with recomputation
	tp, cp  float64  // exposed tensor- and context-parallel communication
	ep      float64  // exposed all-to-all (expert parallelism)
	a2a     float64  // the all-to-all before any overlap
	routed  routedCost
	act     float64 // activations kept until the backward, bytes
	working float64 // the transient of recomputing it (full: the whole layer's; selective: the core)
}

// kinds are the four layer kinds, the embedding and the output layer (and
// the MTP modules) of a plan under one placement.
type kinds struct {
	k               kernels
	kind            [2][2]kindCost // [moe][window]
	have            [2][2]bool
	embed, head     passTime
	embedTP, headTP float64
	mtp             kindCost // the MTP modules beyond their layer
	actEmbed        float64
	actHead         float64
}

func kindIndex(moe, window bool) (int, int) { return b2i(moe), b2i(window) }

// generalKinds costs the layer kinds p's model has (layers with and
// without experts, with and without a window) under placement pl and the
// expert placement ex. A dense model (a DualPipe plan of a model the dense
// path describes) has one kind, the dense path's own layer.
func (j Job) generalKinds(p Plan, pl placement, ex expertPlacement) kinds {
	m := j.Model
	var ks kinds
	if !m.general() {
		lc := j.layerCost(p, pl)
		a := j.activations(p)
		ks.k = lc.k
		ks.kind[0][0] = kindCost{compute: lc.compute, tp: lc.tp, cp: lc.cp, act: a.layer, working: a.working}
		ks.have[0][0] = true
		ks.embed, ks.head, ks.embedTP, ks.headTP = lc.embed, lc.head, lc.embedTP, lc.headTP
		ks.actEmbed, ks.actHead = a.embed, a.head
		return ks
	}
	r := j.newRecipe(p, pl)
	ks.k = r.k
	for i := 0; i < m.Layers; i++ {
		mo, w := kindIndex(m.moeLayer(i), m.windowLayer(i))
		if !ks.have[mo][w] {
			ks.kind[mo][w], ks.have[mo][w] = r.kind(pl, ex, mo == 1, w == 1), true
		}
	}
	ks.embed, ks.head = j.embedCompute(p, r.k), j.headCompute(p, r.k)
	S := r.T * float64(m.Hidden) * r.k.e
	c := j.Cluster
	ks.embedTP = c.allReduce(S, pl.tp)
	ks.headTP = 3 * c.allReduce(4*r.T, pl.tp)
	if p.SP {
		ks.headTP += 2 * c.allGather(S, pl.tp)
	}
	seqSplit := 1.0
	if p.SP {
		seqSplit = r.t
	}
	h := float64(m.Hidden)
	ks.actHead = r.T * (2*h*r.k.e/seqSplit + 4*float64(m.Vocab)/r.t)
	if m.MTP > 0 {
		ks.mtp = r.mtp(pl, ex, ks)
	}
	return ks
}

// kind costs one layer with (moe) or without routed experts and with or
// without a sliding window.
func (r recipe) kind(pl placement, ex expertPlacement, moe, windowed bool) kindCost {
	m := r.j.Model
	w := 0
	if windowed {
		w = m.Window
	}
	att := r.attention(w)
	f := m.FFN
	if moe {
		f = m.MoE.SharedFFN
	}
	ml := r.mlp(f)
	var kc kindCost
	kc.compute = att.compute.add(ml.compute)
	pairs := append(append([]tpPair(nil), att.pairs...), ml.pairs...)
	tpF, tpB := r.tpExposed(pl, pairs)
	core := r.core(w)
	kc.cp = r.cpExposed(pl, core)
	var a2aF, a2aB float64
	if moe {
		kc.routed = r.routed(ex)
		kc.compute = kc.compute.add(kc.routed.compute)
		a2aF, a2aB = kc.routed.a2aFwd, kc.routed.a2aBwd
	}
	kc.act, kc.working = r.kindAct(moe, kc.routed)
	switch r.p.Recompute {
	case RecomputeFull:
		kc.compute.rc = kc.compute.fwd
		tpB += tpF
		a2aB += a2aF
	case RecomputeSelective:
		if !r.p.Flash {
			kc.compute.rc = core.fwd
		}
	}
	kc.tp = tpF + tpB
	kc.a2a = a2aF + a2aB
	kc.ep = kc.a2a
	if r.j.Cluster.Software.MoE.EPOverlap || r.p.Schedule.dual() {
		// Another micro-batch's backward computes while this forward's
		// tokens travel, and its forward while this backward's do.
		kc.ep = hideBehind(a2aF, kc.compute.bwd+kc.compute.rc) + hideBehind(a2aB, kc.compute.fwd)
	}
	return kc
}

// mtp is DeepSeek-V3's MTP modules on the last stage, beyond their
// transformer layer (of the model's last kind): each projects the
// concatenation of two normalised h-wide inputs back to h (a 2h → h GEMM
// on the gathered tokens, split by tp) and runs the output layer and loss
// again.
func (r recipe) mtp(pl placement, ex expertPlacement, ks kinds) kindCost {
	m := r.j.Model
	last := m.Layers - 1
	mo, w := kindIndex(m.moeLayer(last), m.windowLayer(last))
	kc := ks.kind[mo][w]
	h := float64(m.Hidden)
	proj := r.linear(r.T, h/r.t, 2*h, false).pass()
	n := float64(m.MTP)
	kc.compute = kc.compute.add(proj).add(ks.head).add(r.elementwise(4*h*r.k.e, 3)).scale(n)
	kc.tp = n * (kc.tp + ks.headTP)
	kc.cp, kc.ep, kc.a2a = n*kc.cp, n*kc.ep, n*kc.a2a
	kc.act = n * (kc.act + ks.actHead + r.T*2*h*r.k.e)
	return kc
}

// kindAct is one layer's activations for one micro-batch on a device
// (the dense path's layerToken, block by block):
//
//	attention  norm input h·e and the Q/K/V (or MLA down-projection)
//	           input h·e (split by tp under sp); grouped-query: q, k, v
//	           (a + 2kv)·d·e, the attention output a·d·e and flash's 4a
//	           log-sum-exp bytes (split by tp), q/k norms' inputs 2(a+kv)d·e;
//	           MLA: the gathered latents (q_r + kv_r + d_r)·e and their
//	           normalised copies (q_r + kv_r)·e, q and k a·(d_n+d_r)·e each,
//	           v and the output a·d_v·e each, split by tp
//	mlp        norm input and MLP input h·e each (split under sp), gate and
//	           up 2f·e and their product f·e (split by tp)
//	routed     the router's fp32 scores and top-k (4E + 12k bytes per routed
//	           token), the rank's R token copies at the experts' input h·e,
//	           their gate and up 2f_e/ETP·e and product f_e/ETP·e, and the
//	           k·n expert outputs the combine weights (k·h·e per routed
//	           token)
//
// Under fp8 the GEMM inputs are kept as one-byte copies. Full
// recomputation keeps only the layer input h·e (split under sp) and
// returns the rest as the working set; selective drops a materialised
// core.
func (r recipe) kindAct(moe bool, rc routedCost) (kept, working float64) {
	m := r.j.Model
	h, a, t, e := float64(m.Hidden), float64(m.Heads), r.t, r.k.e
	eg := e
	if r.p.Precision == FP8 {
		eg = 1
	}
	seqSplit := 1.0
	if r.p.SP {
		seqSplit = t
	}
	repl := (2*h*e + 2*h*eg) / seqSplit // both blocks' norm and GEMM inputs
	var split, gathered, core float64
	if m.mla() {
		x := m.MLA
		qk, v := float64(x.QKNope+x.QKRope), float64(x.V)
		gathered = float64(x.QRank+x.KVRank+x.QKRope)*e + float64(x.QRank+x.KVRank)*eg
		split = (2*a*qk*e + a*v*e + a*v*eg) / t
	} else {
		d, kv := float64(m.HD()), float64(m.KVHeads)
		split = ((a+2*kv)*d*e + a*d*eg) / t
		if m.QKNorm {
			split += 2 * (a + kv) * d * e / t
		}
	}
	if r.p.Flash {
		split += 4 * a / t
	} else {
		core = a / t * float64(r.j.Seq) * e
	}
	f := float64(m.FFN)
	if moe {
		f = float64(m.MoE.SharedFFN)
	}
	split += (2*f*e + f*eg) / t
	T := r.T
	full := T * (repl + split + gathered + core)
	if moe {
		x := m.MoE
		_, etp := r.p.Experts()
		fe := float64(x.FFN) / float64(etp)
		n := r.routedTokens()
		full += n*(4*float64(x.Experts)+12*float64(x.TopK)) + rc.local*(h*eg+2*fe*e+fe*eg) + float64(x.TopK)*n*h*e
	}
	switch r.p.Recompute {
	case RecomputeFull:
		return T * h * e / seqSplit, full
	case RecomputeSelective:
		return full - T*core, T * core
	}
	return full, 0
}

// moeWorkspace is the dispatcher's largest transient on a device: the
// permuted copies k·n·h·e, the all-to-all's receive buffer ρ times that,
// and with ETP > 1 the ETP-gathered tokens R·h·e.
func (r recipe) moeWorkspace() float64 {
	m := r.j.Model
	if !m.moe() {
		return 0
	}
	_, etp := r.p.Experts()
	h, e := float64(m.Hidden), r.k.e
	n, K := r.routedTokens(), float64(m.MoE.TopK)
	ws := K * n * h * e * (1 + r.j.routedLoad())
	if etp > 1 {
		ws += r.j.routedLoad() * K * n * float64(etp) * h * e
	}
	return ws
}

// maxWorking is the largest working set of any kind.
func (ks kinds) maxWorking() float64 {
	f := 0.0
	for a := 0; a < 2; a++ {
		for b := 0; b < 2; b++ {
			if ks.have[a][b] {
				f = math.Max(f, ks.kind[a][b].working)
			}
		}
	}
	return f
}
