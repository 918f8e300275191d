package plan

import "math"

// The routed block of an MoE layer for one micro-batch on one device.
//
// With n = T/t tokens routed by a rank (its sequence-parallel share), k
// experts per token, E experts over EP ranks (E_l = E/EP each) split ETP
// ways, and ρ the busiest rank's load over its balanced share
// (Job.Imbalance; with a capacity factor c the experts are padded to
// exactly c times the balanced load, so ρ = c):
//
//	router     an n × E × h GEMM (16-bit also under fp8) and the scores'
//	           softmax or sigmoid and top-k over n·E fp32 values
//	permute    the k copies of every token gathered by expert and scattered
//	           back, (2 + 2k)·n·h·e bytes each way
//	dispatch   each rank sends k·n·h·e bytes and the busiest receives ρ
//	           times its share (moeA2A); combine sends them back; the
//	           backward repeats both; with ETP > 1 the received tokens are
//	           all-gathered in the ETP group before the experts and
//	           reduce-scattered after
//	experts    R = ρ·k·n·ETP token copies on the rank, m_e = R/E_l per
//	           expert: E_l grouped GEMMs m_e × 2f_e/ETP × h (gate, up) and
//	           m_e × h × f_e/ETP (down), forward, dX and dW, each at the
//	           size-dependent efficiency η(m_e, ·, ·): small per-expert
//	           batches run far below a dense GEMM's; a loop of E_l GEMMs
//	           (Software.MoE.ExpertLoop) pays a kernel gap each
//	SwiGLU     3·R·f_e/ETP·e bytes
type routedCost struct {
	compute        passTime // router, permute, experts and their activation
	experts        passTime // the expert GEMMs alone
	a2aFwd, a2aBwd float64  // dispatch + combine (+ ETP gather/scatter), forward and backward, busiest rank
	perExpert      float64  // m_e, tokens per local expert
	local          float64  // R, token copies the rank's experts compute
}

// routedLoad is ρ, the busiest rank's routed tokens over the balanced
// share: the imbalance, or with a capacity factor that factor (the experts
// are padded to it and what exceeds it is dropped).
func (j Job) routedLoad() float64 {
	if c := j.Model.MoE.CapacityFactor; c > 0 {
		return c
	}
	return j.imbalance()
}

// BusiestExpertRows is R = ρ·k·n·ETP, the token copies the busiest
// expert-parallel rank's experts compute per MoE layer and micro-batch
// under p (n the tokens a rank routes, ρ routedLoad: Job.Imbalance
// dropless, the capacity factor with one): what the dispatch's receive
// buffers hold at that imbalance (the engine sizes them for the worst
// case, arch's ExpertRows, and counts what it receives:
// metrics.Experts.RecvRowsMax). 0 for a dense model.
func (j Job) BusiestExpertRows(p Plan) float64 {
	if !j.Model.moe() {
		return 0
	}
	_, etp := p.Experts()
	r := recipe{j: j, p: p, T: j.tokens(p), t: float64(p.TP)}
	return j.routedLoad() * float64(j.Model.MoE.TopK) * r.routedTokens() * float64(etp)
}

// routedTokens is n, the tokens a rank routes per micro-batch (its share
// of the sequence under sp).
func (r *recipe) routedTokens() float64 {
	if r.p.SP {
		return r.T / r.t
	}
	return r.T
}

func (r *recipe) routed(ex expertPlacement) routedCost {
	j, m := r.j, r.j.Model
	e := m.experts()
	ep, etp := r.p.Experts()
	h, E, K := float64(m.Hidden), float64(e.Experts), float64(e.TopK)
	fe := float64(e.FFN) / float64(etp)
	n := r.routedTokens()
	rho := j.routedLoad()
	el := E / float64(ep)
	R := rho * K * n * float64(etp)
	me := R / el
	var c routedCost
	c.perExpert, c.local = me, R

	hi := r.k.high()
	rf, rdx, rdw := hi.gemmParts(n, E, h, 1)
	c.compute = passTime{fwd: rf, bwd: rdx + rdw, wgt: rdw}
	c.compute = c.compute.add(passTime{fwd: r.k.stream(n*E*4*3, 3), bwd: r.k.stream(n*E*4*6, 6)})
	perm := (2 + 2*K) * n * h * r.k.e
	c.compute = c.compute.add(passTime{fwd: r.k.stream(perm, 2), bwd: r.k.stream(perm, 2)})

	up, down := r.grouped(el, me, 2*fe, h), r.grouped(el, me, h, fe)
	c.experts = up.pass().add(down.pass())
	c.compute = c.compute.add(c.experts)
	act := 3 * R * fe * r.k.e
	c.compute = c.compute.add(passTime{fwd: r.k.stream(act, 1), bwd: r.k.stream(2*act, 2)})

	disp, comb := r.moeA2A(ex, n, rho)
	gath := 0.0
	if etp > 1 {
		cl := j.Cluster
		S := R * h * r.k.e
		gath = cl.allGather(S, ex.etp) + cl.reduceScatter(S, ex.etp)
	}
	c.a2aFwd = disp + comb + gath
	c.a2aBwd = disp + comb + gath
	if j.Engine != nil && ex.ep.n > 1 {
		c.a2aFwd, c.a2aBwd = r.engineA2A(ex, n)
	}
	return c
}

// engineA2A is the Trellis engine's all-to-alls of one MoE layer and
// micro-batch over its expert-parallel group of ep ranks (model/ep.go),
// forward and backward, for a rank routing n tokens. Each pass first
// exchanges the per-expert row counts (an all-to-all of E fp32 values a
// rank, E/ep to each peer), then runs two all-to-all-v's of rows of h
// values: forward the tokens out in the activation dtype (e_a: 4 in
// fp32, 2 under a 16-bit policy: model/gpt.go's sendX, recvX) and the
// experts' fp32 outputs back; backward the fp32 output gradients out and
// the fp32 input gradients back. A rank sends each peer the rows of that
// peer's E/ep experts — under capacity routing at most cap = ⌈c·n·k/E⌉
// of each (arch.Config.Capacity; what a rank sends is what survives its
// own capacity), in dropless routing ρ times the balanced share k·n/ep
// (ρ the job's imbalance) — and a token reaches a peer at most
// min(k, E/ep) times (its k experts are distinct):
//
//	Q      = min(E/ep·cap, n·min(k, E/ep))         (capacity: an upper bound)
//	Q      = min(ρ·k·n/ep, n·min(k, E/ep))         (dropless)
//	counts = α + (ep−1)·(E/ep)·4/β
//	rows(e)= α + w·Q·h·e/β
//	fwd    = counts + rows(e_a) + rows(4)          bwd = counts + 2·rows(4)
//
// with w = ep−1 where a rank's messages share one port (a real network),
// and w = 1 where every pair of ranks has its own link
// (EngineStore.PairLinks: comm/local's emulated point-to-point links,
// whose messages to different peers travel at once). Nothing overlaps
// them: the engine blocks on each, so all of it is exposed.
func (r *recipe) engineA2A(ex expertPlacement, n float64) (fwd, bwd float64) {
	j, m := r.j, r.j.Model
	e := m.experts()
	ep := float64(ex.ep.n)
	E, K, h := float64(e.Experts), float64(e.TopK), float64(m.Hidden)
	el := E / ep
	most := n * math.Min(K, el)
	q := math.Min(j.imbalance()*K*n/ep, most)
	if c := e.CapacityFactor; c > 0 {
		q = math.Min(el*math.Ceil(c*n*K/E), most)
	}
	l := j.Cluster.link(ex.ep)
	w := ep - 1
	if j.Engine.PairLinks {
		w = 1
	}
	ea := 4.0
	if r.p.Precision != FP32 {
		ea = 2
	}
	counts := l.Latency + (ep-1)*el*4/l.BW
	rows := func(b float64) float64 { return l.Latency + w*q*h*b/l.BW }
	return counts + rows(ea) + rows(4), counts + 2*rows(4)
}

// grouped is `count` GEMMs of m rows, n outputs, kk inputs, forward, dX
// and dW: one grouped kernel (each problem at its own efficiency, one
// kernel gap), or under Software.MoE.ExpertLoop a loop of count GEMMs,
// one gap each. In fp8 each casts its inputs and output gradient as
// gemmParts does.
func (r *recipe) grouped(count, m, n, kk float64) linearTime {
	k := r.k
	if count < 1 || m <= 0 {
		return linearTime{}
	}
	one := func(m, n, kk float64) float64 {
		if r.j.Cluster.Software.MoE.ExpertLoop {
			return count * k.gemm(1, m, n, kk)
		}
		return k.gemm(count, m, n, kk)
	}
	lt := linearTime{fwd: one(m, n, kk), dx: one(m, kk, n), dw: one(kk, n, m)}
	if k.fp8 {
		in, ik, g, gk := k.fp8Casts()
		lt.fwd += k.stream(in*m*kk*count, ik)
		lt.dx += k.stream(g*m*n*count, gk)
	}
	return lt
}

// dispatchBytes is the bytes of one dispatched element: 16-bit, or under
// fp8 with Software.MoE.FP8Dispatch one byte and a 4-byte scale per 128.
func (r *recipe) dispatchBytes() float64 {
	if r.p.Precision == FP8 && r.j.Cluster.Software.MoE.FP8Dispatch {
		return 1 + 4.0/128
	}
	return r.k.e
}

// moeA2A is the dispatch and the combine of one micro-batch's n tokens
// (k copies each, h wide) over the expert-parallel group of ep.n ranks,
// ep.k of them per node on N = ep.n/ep.k nodes, for the busiest rank (ρ
// times its share). A rank's copies are spread evenly over the group:
// (k_ep−1)/EP of them to the other GPUs of its node over NVLink,
// (EP−k_ep)/EP to other nodes.
//
//	alltoall   every copy travels: max(S·(k_ep−1)/EP / β_intra,
//	           S·(EP−k_ep)/EP / β_inter), S = k·n·h·e
//	deepep     a token crosses InfiniBand once per remote node it reaches,
//	           D·(N−1)/N of them with D = N'·(1 − (1 − 1/N')^k) the
//	           expected distinct nodes of its k experts over the N' nodes
//	           its group limit allows (DeepSeek-V3's node-limited routing: 4
//	           of 8 groups, each a node of EP64), and is forwarded over
//	           NVLink to the GPUs of that node that hold its experts
//	allgather  the group all-gathers every rank's n tokens and
//	           reduce-scatters the results (the busiest rank's load does
//	           not change the bytes)
//
// plus one latency of the link the group crosses.
func (r *recipe) moeA2A(ex expertPlacement, n, rho float64) (dispatch, combine float64) {
	g := ex.ep
	if g.n <= 1 {
		return 0, 0
	}
	c := r.j.Cluster
	m := r.j.Model
	h, K := float64(m.Hidden), float64(m.MoE.TopK)
	ep, kk := float64(g.n), float64(g.k)
	lat := c.link(g).Latency
	if c.Software.MoE.Dispatcher == "allgather" {
		full := func(e float64) float64 { return ep * n * h * e }
		return c.allGather(full(r.dispatchBytes()), g), c.reduceScatter(full(r.k.e), g)
	}
	inNode, remote := (kk-1)/ep, (ep-kk)/ep
	one := func(e float64) float64 {
		S := K * n * h * e
		intra, inter := S*inNode/c.Intra.BW, S*remote/c.Inter.BW
		if c.Software.MoE.Dispatcher == "deepep" && g.nodes() > 1 {
			N := float64(g.nodes())
			intra += S * remote * (kk - 1) / kk / c.Intra.BW
			inter = n * h * e * r.distinctNodes(g.nodes()) * (N - 1) / N / c.Inter.BW
		}
		return rho*math.Max(intra, inter) + lat
	}
	return one(r.dispatchBytes()), one(r.k.e)
}

// distinctNodes is D, the expected number of distinct nodes a token's k
// experts lie on, the experts spread evenly over N nodes and the token
// limited to GroupTopK of the model's Groups expert groups (each group
// N/Groups nodes, or several groups a node).
func (r *recipe) distinctNodes(N int) float64 {
	e := r.j.Model.experts()
	allowed := float64(N)
	if e.Groups > 0 {
		allowed = math.Min(allowed, float64(e.GroupTopK)*math.Max(1, float64(N)/float64(e.Groups)))
	}
	return allowed * (1 - math.Pow(1-1/allowed, float64(e.TopK)))
}
