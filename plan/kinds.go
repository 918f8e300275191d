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
	if !j.Model.general() {
		lc := j.layerCost(p, pl)
		a := j.activations(p)
		var ks kinds
		ks.k = lc.k
		ks.kind[0][0] = kindCost{compute: lc.compute, tp: lc.tp, cp: lc.cp, act: a.layer, working: a.working}
		ks.have[0][0] = true
		ks.embed, ks.head, ks.embedTP, ks.headTP = lc.embed, lc.head, lc.embedTP, lc.headTP
		ks.actEmbed, ks.actHead = a.embed, a.head
		return ks
	}
	ks := j.kindSetOf(p, pl, ex)
	return ks.apply(j, p)
}

// kindSet is a general model's kinds before the recomputation policy and
// the all-to-all's overlap, which the search varies over the same GEMMs
// and collectives (apply).
type kindSet struct {
	k               kernels
	part            [2][2]kindPart
	have            [2][2]bool
	embed, head     passTime
	embedTP, headTP float64
	actEmbed        float64
	actHead         float64
	mtpExtra        passTime // an MTP module's projection, norms and second head
	mtpAct          float64  // … and what they keep
}

// kindPart is one layer kind without recomputation: its compute, its
// tensor- and context-parallel exposure and its all-to-all forward and
// backward, the attention core's forward, and its activations: all it
// keeps (full), the materialised core and the layer input.
type kindPart struct {
	compute              passTime
	tpF, tpB, cp         float64
	cpRc                 float64 // the context-parallel ring again under full recomputation
	a2aF, a2aB           float64
	pairs                []tpPair // its GEMMs and what tensor parallelism moves (read only)
	core                 passTime // the attention core
	routed               routedCost
	full, coreAct, input float64
	sac, sacSaved        float64 // under Software.OpSAC: what the block keeps, the forward time not recomputed
}

func (j Job) kindSetOf(p Plan, pl placement, ex expertPlacement) kindSet {
	return j.kindSetFrom(p, pl, ex, nil)
}

// kindSetFrom is kindSetOf reusing from, the kinds of the same plan under
// another placement with the same tensor-parallel chunking (tpOverlap):
// the GEMMs, the routed experts and the activations are the same, only
// the tensor- and context-parallel exposure is costed again. A nil or
// empty from is costed whole.
func (j Job) kindSetFrom(p Plan, pl placement, ex expertPlacement, from *kindSet) kindSet {
	m := j.Model
	r := j.newRecipe(p, pl)
	if from != nil && from.k.peak > 0 {
		ks := *from
		for a := 0; a < 2; a++ {
			for b := 0; b < 2; b++ {
				if kp := &ks.part[a][b]; ks.have[a][b] {
					kp.tpF, kp.tpB = r.tpExposed(pl, kp.pairs)
					kp.cp, kp.cpRc = r.cpExposed(pl, kp.core)
				}
			}
		}
		ks.embedTP, ks.headTP = j.endsTP(p, r, pl)
		return ks
	}
	var ks kindSet
	ks.k = r.k
	for i := 0; i < m.Layers; i++ {
		mo, w := kindIndex(m.moeLayer(i), m.windowLayer(i))
		if !ks.have[mo][w] {
			ks.part[mo][w], ks.have[mo][w] = r.kindPart(pl, ex, mo == 1, w == 1), true
		}
	}
	ks.embed, ks.head = j.embedCompute(p, r.k), j.headCompute(p, r.k)
	h := float64(m.Hidden)
	ks.embedTP, ks.headTP = j.endsTP(p, r, pl)
	seqSplit := 1.0
	if p.SP {
		seqSplit = r.t
	}
	ks.actHead = r.T * (2*h*r.k.e/seqSplit + 4*float64(m.Vocab)/r.t)
	if m.MTP > 0 {
		// DeepSeek-V3's MTP modules on the last stage, beyond their
		// transformer layer (of the model's last kind): each projects the
		// concatenation of two normalised h-wide inputs back to h (a 2h → h
		// GEMM on the gathered tokens, split by tp) and runs the output
		// layer and loss again.
		proj := r.linear(r.T, h/r.t, 2*h, false).pass()
		ks.mtpExtra = proj.add(ks.head).add(r.elementwise(4*h*r.k.e, 3))
		ks.mtpAct = ks.actHead + r.T*2*h*r.k.e
	}
	return ks
}

// endsTP is the embedding's and the output layer's tensor-parallel
// communication: the embedding's all-reduce of its h-wide output, the
// loss's three of 4 bytes per token, and under sp the output layer's
// gather of its input and its gradient's reduce-scatter.
func (j Job) endsTP(p Plan, r recipe, pl placement) (embed, head float64) {
	c := j.Cluster
	S := r.T * float64(j.Model.Hidden) * r.k.e
	embed = c.allReduce(S, pl.tp)
	head = 3 * c.allReduce(4*r.T, pl.tp)
	if p.SP {
		head += 2 * c.allGather(S, pl.tp)
	}
	return embed, head
}

// kindPart costs one layer with (moe) or without routed experts and with
// or without a sliding window, before recomputation.
func (r *recipe) kindPart(pl placement, ex expertPlacement, moe, windowed bool) kindPart {
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
	var kp kindPart
	kp.compute = att.compute.add(ml.compute)
	kp.pairs = append(append(make([]tpPair, 0, len(att.pairs)+len(ml.pairs)), att.pairs...), ml.pairs...)
	kp.tpF, kp.tpB = r.tpExposed(pl, kp.pairs)
	kp.core = r.core(w)
	kp.cp, kp.cpRc = r.cpExposed(pl, kp.core)
	if moe {
		kp.routed = r.routed(ex)
		kp.compute = kp.compute.add(kp.routed.compute)
		kp.a2aF, kp.a2aB = kp.routed.a2aFwd, kp.routed.a2aBwd
	}
	kp.full, kp.coreAct, kp.input = r.kindActParts(moe, kp.routed)
	if r.j.Cluster.Software.OpSAC {
		kp.sac, kp.sacSaved = r.opSACKept(moe, kp.routed.local), opSACSaved(kp.pairs, kp.core)
	}
	return kp
}

// apply is the kinds under p's recomputation and schedule.
func (s *kindSet) apply(j Job, p Plan) kinds {
	ks := kinds{k: s.k, have: s.have, embed: s.embed, head: s.head, embedTP: s.embedTP, headTP: s.headTP,
		actEmbed: s.actEmbed, actHead: s.actHead}
	overlap := j.Cluster.Software.MoE.EPOverlap || p.Schedule.dual()
	share := j.Cluster.overlapFloor()
	for a := 0; a < 2; a++ {
		for b := 0; b < 2; b++ {
			if s.have[a][b] {
				ks.kind[a][b] = s.part[a][b].apply(p, overlap, share)
				if p.EPOverlap && j.Engine != nil { // the engine's pair; elsewhere the cluster's moe_ep_overlap says
					kc := &ks.kind[a][b]
					kc.ep = enginePairExposed(kc.a2a, kc.compute.fwd+kc.compute.bwd+kc.compute.rc, j.MicroBatches(p))
				}
			}
		}
	}
	if m := j.Model; m.MTP > 0 {
		last := m.Layers - 1
		mo, w := kindIndex(m.moeLayer(last), m.windowLayer(last))
		kc := ks.kind[mo][w]
		n := float64(m.MTP)
		kc.compute = kc.compute.add(s.mtpExtra).scale(n)
		kc.tp = n * (kc.tp + s.headTP)
		kc.cp, kc.ep, kc.a2a = n*kc.cp, n*kc.ep, n*kc.a2a
		kc.act = n * (kc.act + s.mtpAct)
		ks.mtp = kc
	}
	return ks
}

// apply is the layer under p's recomputation: full recomputes the forward
// (its collectives and all-to-all again) and keeps only the layer input,
// selective recomputes a materialised core and drops it; with the EP
// overlap another micro-batch's backward computes while this forward's
// tokens travel, and its forward while this backward's do, slowed by the
// share of the SMs the transfer holds (overlapExposed).
func (kp *kindPart) apply(p Plan, overlap bool, share float64) kindCost {
	kc := kindCost{compute: kp.compute, cp: kp.cp, routed: kp.routed}
	tpF, tpB, a2aF, a2aB := kp.tpF, kp.tpB, kp.a2aF, kp.a2aB
	kc.act, kc.working = kp.full, 0
	switch p.Recompute {
	case RecomputeFull:
		kc.compute.rc = kc.compute.fwd
		tpB += tpF
		a2aB += a2aF
		kc.cp += kp.cpRc
		kc.act, kc.working = kp.input, kp.full
	case RecomputeSelective:
		if kp.sacSaved > 0 || kp.sac > 0 { // torchtitan's per-op policy (sac.go)
			kc.compute.rc = math.Max(0, kc.compute.fwd-kp.sacSaved)
			kc.act, kc.working = kp.sac, math.Max(0, kp.full-kp.sac)
			break
		}
		if !p.Flash {
			kc.compute.rc = kp.core.fwd
			kc.cp += kp.cpRc // the rerun core is the ring's forward again
		}
		kc.act, kc.working = kp.full-kp.coreAct, kp.coreAct
	}
	kc.tp = tpF + tpB
	kc.a2a = a2aF + a2aB
	kc.ep = kc.a2a
	if overlap {
		kc.ep = overlapExposed(a2aF, kc.compute.bwd+kc.compute.rc, share) + overlapExposed(a2aB, kc.compute.fwd, share)
	}
	return kc
}

// enginePairExposed is the engine's exposed all-to-all time of a layer
// under ep_overlap=on, per micro-batch, for a seconds of all-to-alls (both
// passes) and c of compute (forward and backward) a micro-batch, over m
// micro-batches a step: of a step's m forwards and m backwards, the first
// forward and the last backward run alone (all of their transfers
// exposed, 1/m of the step's a), and the m−1 pairs F(i+1) + B(i) overlap
// each pass's transfers with the other's compute. The two passes'
// transfers share the rank's link to its peer, so a pair takes
// max(a, c) and exposes max(0, a − c) (a compute-bound pair exposes
// nothing):
//
//	exposed = a/m + (m−1)/m · max(0, a − c)
func enginePairExposed(a, c float64, m int) float64 {
	if m <= 1 {
		return a
	}
	mf := float64(m)
	return a/mf + (mf-1)/mf*math.Max(0, a-c)
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
func (r *recipe) kindAct(moe bool, rc routedCost) (kept, working float64) {
	full, core, input := r.kindActParts(moe, rc)
	switch r.p.Recompute {
	case RecomputeFull:
		return input, full
	case RecomputeSelective:
		if r.j.Cluster.Software.OpSAC {
			sac := r.opSACKept(moe, rc.local)
			return sac, math.Max(0, full-sac)
		}
		return full - core, core
	}
	return full, 0
}

// kindActParts is kindAct's all kept without recomputation, the
// materialised core and the layer input.
func (r *recipe) kindActParts(moe bool, rc routedCost) (full, core, input float64) {
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
	var split, gathered, coreT float64
	if m.mla() {
		x := m.latent()
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
		coreT = a / t * float64(r.j.Seq) * e
	}
	f := float64(m.FFN)
	if moe {
		f = float64(m.MoE.SharedFFN)
	}
	split += (2*f*e + f*eg) / t
	T := r.T
	full = T * (repl + split + gathered + coreT)
	if moe {
		x := m.experts()
		_, etp := r.p.Experts()
		fe := float64(x.FFN) / float64(etp)
		n := r.routedTokens()
		full += n*(4*float64(x.Experts)+12*float64(x.TopK)) + rc.local*(h*eg+2*fe*e+fe*eg) + float64(x.TopK)*n*h*e
	}
	return full, T * coreT, T * h * e / seqSplit
}

// moeWorkspace is the dispatcher's largest transient on a device: the
// permuted copies k·n·h·e, the all-to-all's receive buffer ρ times that,
// and with ETP > 1 the ETP-gathered tokens R·h·e.
func (r *recipe) moeWorkspace() float64 {
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
