package plan

import "math"

// Layer recipes of the general path (Model.general: experts, MLA, q/k
// norms, windows, MTP). A transformer layer is three blocks, each costed
// from its GEMMs, its memory-bound work and its collectives, for one
// micro-batch of T = mbs·s/cp tokens on one of t tensor ranks:
//
//	attention  norm, Q/K/V (grouped-query: one column-parallel GEMM; MLA:
//	           down-projections on the rank's T/t tokens, their latents
//	           gathered, up-projections column-parallel), the core, the
//	           row-parallel output, a residual; one all-gather +
//	           reduce-scatter pair under sp (all-reduces without)
//	mlp        norm, a gated MLP of width f (a dense layer's FFN, or an MoE
//	           layer's shared experts; none when it has none), a residual;
//	           another pair when f > 0
//	routed     an MoE layer's router, dispatch, experts and combine
//	           (moecost.go)
//
// For a dense grouped-query model the attention and mlp blocks are the
// dense path's layer (layerLinear, elementwise, layerComm): the test
// TestRecipeMatchesDenseLayer holds them equal (but where the dense path
// hides the backward's collectives behind chunked GEMMs its placement does
// not run, which the test names).

// tpPair is a column-parallel GEMM and the row-parallel GEMM after it,
// with the bytes gathered before the first and reduced after the second.
type tpPair struct {
	col, row linearTime
	ag, rs   float64 // bytes of the all-gather (input) and reduce-scatter (output)
}

// block is one block's compute for one micro-batch, its tensor-parallel
// pairs and the GEMMs that hide a pipelined collective.
type block struct {
	compute passTime
	pairs   []tpPair
}

// recipe builds the blocks of p's layers on one device.
type recipe struct {
	j       Job
	p       Plan
	k       kernels
	T       float64 // tokens of a micro-batch on a cp rank
	t       float64 // tensor ranks
	chunks  float64 // pieces of the forward and dX GEMMs (tp overlap)
	overlap bool    // tensor-parallel collectives pipelined with their GEMMs
}

func (j Job) newRecipe(p Plan, pl placement) recipe {
	r := recipe{j: j, p: p, k: j.kernelsFor(p.Precision), T: j.tokens(p), t: float64(p.TP), chunks: 1}
	if r.overlap = j.tpOverlap(p, pl); r.overlap {
		r.chunks = r.t
	}
	return r
}

// linear is one linear layer of m rows, n outputs, kk inputs, its forward
// and dX GEMMs in r.chunks pieces when chunked.
func (r *recipe) linear(m, n, kk float64, chunked bool) linearTime {
	c := 1.0
	if chunked {
		c = r.chunks
	}
	f, dx, dw := r.k.gemmParts(m, n, kk, c)
	return linearTime{f, dx, dw}
}

func (lt linearTime) pass() passTime { return passTime{fwd: lt.fwd, bwd: lt.dx + lt.dw, wgt: lt.dw} }

func sumLinear(ls ...linearTime) linearTime {
	var s linearTime
	for _, l := range ls {
		s.fwd, s.dx, s.dw = s.fwd+l.fwd, s.dx+l.dx, s.dw+l.dw
	}
	return s
}

// elementwise streams `bytes` per token of the micro-batch in `kern`
// kernels forward, twice the bytes and kernels backward.
func (r *recipe) elementwise(bytes, kern float64) passTime {
	b := r.T * bytes
	return passTime{fwd: r.k.stream(b, kern), bwd: r.k.stream(2*b, 2*kern)}
}

// residualBytes is a norm (read and write h) and a residual add (read 2h,
// write h; GPT's fused bias-dropout-add also writes an h-byte mask), per
// token on a tensor rank: split by t under sp.
func (r *recipe) residualBytes() float64 {
	h := float64(r.j.Model.Hidden)
	b := 2*h*r.k.e + 3*h*r.k.e
	if r.j.Model.Dropout {
		b += h
	}
	if r.p.SP {
		b /= r.t
	}
	return b
}

// attention is the attention block of a layer (window: its keys per
// query, 0 for full causal attention).
func (r *recipe) attention(window int) block {
	m := r.j.Model
	h, a, t, e := float64(m.Hidden), float64(m.Heads), r.t, r.k.e
	var b block
	var kern float64
	split := 0.0 // memory-bound bytes per token split by tp
	repl := 0.0  // … on every tensor rank's T tokens (MLA's gathered latents)
	if m.mla() {
		x := m.latent()
		qk, dr := float64(x.QKNope+x.QKRope), float64(x.QKRope)
		qr, kvr := float64(x.QRank), float64(x.KVRank)
		shard := r.T // the down-projections run on the rank's own tokens
		if r.p.SP {
			shard /= t
		}
		down := r.linear(shard, kvr+dr, h, false)
		up := r.linear(r.T, a*(qk+float64(x.V))/t, kvr, true)
		agBytes := kvr + dr
		if x.QRank > 0 {
			down = sumLinear(down, r.linear(shard, qr, h, false))
			up = sumLinear(up, r.linear(r.T, a*qk/t, qr, true))
			agBytes += qr
		} else {
			up = sumLinear(up, r.linear(r.T, a*qk/t, h, true))
			agBytes += h
		}
		out := r.linear(r.T, h, a*float64(x.V)/t, true)
		b.compute = down.pass()
		b.pairs = []tpPair{{col: up, row: out, ag: r.T * agBytes * e, rs: r.T * h * e}}
		repl = 2 * (qr + kvr) * e       // the latents' norms
		split = 2 * (a*dr/t + dr/t) * e // rotary on q_pe and the shared k_pe
		kern = 4
	} else {
		d, kv := float64(m.HD()), float64(m.KVHeads)
		qkv := r.linear(r.T, (a+2*kv)*d/t, h, true)
		out := r.linear(r.T, h, a*d/t, true)
		S := r.T * h * e
		b.pairs = []tpPair{{col: qkv, row: out, ag: S, rs: S}}
		kern = 2
		if m.gated() { // rotary embeddings on q and k
			split, kern = 2*(a+kv)*d*e, 3
		}
		if m.QKNorm {
			split += 2 * (a + kv) * d * e
			kern++
		}
	}
	b.compute = b.compute.add(r.pairCompute(b.pairs))
	b.compute = b.compute.add(r.core(window))
	ew := r.elementwise(r.residualBytes()+split/t+repl, kern)
	b.compute = b.compute.add(ew)
	return b
}

// pairCompute is the GEMMs of the pairs.
func (r *recipe) pairCompute(ps []tpPair) passTime {
	var c passTime
	for _, q := range ps {
		c = c.add(q.col.pass()).add(q.row.pass())
	}
	return c
}

// core is the attention core: the dense path's attentionCore with MLA's
// head sizes (d_n + d_r for scores, d_v for values: their mean as d) and,
// for a sliding-window layer, the s·w − w²/2 query-key pairs of a causal
// window instead of s²/2.
func (r *recipe) core(window int) passTime {
	j := r.j
	m := j.Model
	if !m.mla() && window == 0 {
		return j.attentionCore(r.p, r.k)
	}
	k := r.k.high()
	d := float64(m.HD())
	if m.mla() {
		d = float64(m.MLA.QKNope+m.MLA.QKRope+m.MLA.V) / 2
	}
	heads := float64(r.p.MBS) * float64(m.Heads) / r.t
	s, cp := float64(j.Seq), float64(r.p.CP)
	if !r.p.Flash && !j.ringTiles(r.p) { // materialised: the full s×s, masked not skipped (as attentionCore)
		flops := 4 * heads * s / cp * s * d
		g := k.gemmEfficiency(s/cp, s, d)
		scores := heads * s / cp * s
		return passTime{fwd: flops/(k.peak*g) + k.stream(scores*2*k.e, 2),
			bwd: 2*flops/(k.peak*g) + k.stream(scores*3*k.e, 2)}
	}
	pairs := s * s / 2
	if w := float64(window); w > 0 && w < s {
		pairs = s*w - w*w/2
	}
	flops := 4 * heads * pairs / cp * d
	eff := k.peak * j.attnEff(r.p)
	return passTime{fwd: flops/eff + k.a.KernelGap, bwd: 2.5*flops/(0.8*eff) + k.a.KernelGap}.add(j.ringTileTime(r.p, heads))
}

// mlp is a layer's MLP block of width f (0: only the norm and residual of
// an MoE layer without shared experts).
func (r *recipe) mlp(f int) block {
	m := r.j.Model
	h, ff, e := float64(m.Hidden), float64(f), r.k.e
	var b block
	if f == 0 {
		b.compute = r.elementwise(r.residualBytes(), 2)
		return b
	}
	up := ff / r.t
	act, kern := 2*ff*e, 3.0 // GELU reads and writes f
	if m.gated() {
		up, act = 2*ff/r.t, 3*ff*e
	}
	S := r.T * h * e
	b.pairs = []tpPair{{col: r.linear(r.T, up, h, true), row: r.linear(r.T, h, ff/r.t, true), ag: S, rs: S}}
	b.compute = r.pairCompute(b.pairs).add(r.elementwise(r.residualBytes()+act/r.t, kern))
	return b
}

// tpExposed is the exposed tensor-parallel communication of a layer's
// pairs for one micro-batch: the dense path's layerComm, pair by pair.
// Pipelined with the GEMMs (TPCommOverlap, sp, inside a node), each
// collective is exposed by max(c/t, c − g); otherwise the forward's are
// exposed whole and the backward's, with tp_grad_overlap, hide the
// reduction of a column-parallel layer's input gradient behind its dW
// and, under sp, the re-gather of its input behind its dX.
func (r *recipe) tpExposed(pl placement, ps []tpPair) (fwd, bwd float64) {
	if r.overlap {
		return r.tpPipelined(pl, ps)
	}
	return r.tpExposedOn(pl, ps)
}

// tpPipelined is tpExposed with the collectives pipelined with the GEMMs.
func (r *recipe) tpPipelined(pl placement, ps []tpPair) (fwd, bwd float64) {
	c := r.j.Cluster
	if r.p.TP == 1 {
		return 0, 0
	}
	{
		hide := func(comm, gemm float64) float64 { return math.Max(comm/r.t, comm-gemm) }
		for _, q := range ps {
			ag, rs := c.allGather(q.ag, pl.tp), c.reduceScatter(q.rs, pl.tp)
			fwd += hide(ag, q.col.fwd) + hide(rs, q.row.fwd)
			bwd += hide(ag, q.row.dx) + hide(rs, q.col.dx)
		}
		return fwd, bwd
	}
}

// tpExposedOn is tpExposed without pipelining.
func (r *recipe) tpExposedOn(pl placement, ps []tpPair) (fwd, bwd float64) {
	c := r.j.Cluster
	if r.p.TP == 1 {
		return 0, 0
	}
	for _, q := range ps {
		per := c.allReduce(q.rs, pl.tp)
		if r.p.SP {
			per = c.allGather(q.ag, pl.tp) + c.reduceScatter(q.rs, pl.tp)
		}
		fwd += per
		switch {
		case !c.Software.TPGradOverlap:
			bwd += per
		case !r.p.SP:
			bwd += hideBehind(c.allReduce(q.rs, pl.tp), q.col.dw)
		default:
			ag, rs := c.allGather(q.ag, pl.tp), c.reduceScatter(q.rs, pl.tp)
			bwd += ag + hideBehind(rs, q.col.dw) + hideBehind(ag, q.col.dx)
		}
	}
	return fwd, bwd
}

// cpExposed is context parallelism's ring for the attention block (the
// dense path's, layerComm's): cpRing's over the rank's blocks (MLA's:
// a·(d_n+d_r+d_v) values per token over t); cp is its forward and
// backward, rc the forward again (full recomputation, or selective
// without flash, which reruns the core).
func (r *recipe) cpExposed(pl placement, core passTime) (cp, rc float64) {
	if r.p.CP == 1 {
		return 0, 0
	}
	fwd, bwd := cpRing(r.p.CP, r.cpBlock(), r.k.e, r.j.Cluster.link(pl.cp), core)
	return fwd + bwd, fwd
}

// cpRing is the exposed time of the engine's ring (model/ring.go) per
// layer and micro-batch, forward and backward, over n = cp ranks, for
// blocks of kv values (a rank's keys and values, B·(T/cp)·2·KV·d/t) sent
// as K and V in the activation dtype (e bytes: kvE = kv·e) and, in the
// backward, as fp32 sums of dK and dV (kvF = 4·kv): the bytes of
// CPRingBytes. The steps of the core (fwd/n, bwd/n each: the
// load-balanced split gives every step the same work) hide what travels
// during them; with p2p(S) = α + S/β and [x]₊ = max(0, x):
//
//	fwd = (n−1)·[p2p(kvE) − fwd/n]₊
//	bwd = [p2p(kvE) − bwd/n]₊ + (n−2)·[α + (kvE+kvF)/β − bwd/n]₊
//	      + [p2p(kvF) − bwd/n]₊ + p2p(kvF)
//
// The backward's step 0 moves the next K, V block; steps 1…n−2 that and
// the dK, dV sum the previous step sent (the two share the link, their
// latencies overlap); step n−1 the sum alone; and the last step's sum
// comes home after the last compute, exposed whole.
func cpRing(cp int, kv, e float64, l Link, core passTime) (fwd, bwd float64) {
	if cp <= 1 {
		return 0, 0
	}
	n := float64(cp)
	kvE, kvF := kv*e, kv*4
	pos := func(x float64) float64 { return math.Max(0, x) }
	cf, cb := core.fwd/n, core.bwd/n
	fwd = (n - 1) * pos(p2p(kvE, l)-cf)
	bwd = pos(p2p(kvE, l)-cb) + (n-2)*pos(l.Latency+(kvE+kvF)/l.BW-cb) + pos(p2p(kvF, l)-cb) + p2p(kvF, l)
	return fwd, bwd
}

// cpBlock is the ring's block in values: a rank's keys and values of its
// T/cp tokens of the micro-batch, its t-th share of the heads.
func (r *recipe) cpBlock() float64 {
	m := r.j.Model
	perTok := 2 * float64(m.KVHeads) * float64(m.HD())
	if m.mla() {
		perTok = float64(m.Heads) * float64(m.MLA.QKNope+m.MLA.QKRope+m.MLA.V)
	}
	return r.T * perTok / r.t
}

// CPRingBytes is what one rank of a ring of n = cp ranks sends per layer
// and micro-batch (and receives as much), for blocks of kv values (a
// rank's keys and values: B·(T/cp)·2·KV/t) with keys and values of e
// bytes (the activation dtype's, 4 in fp32, 2 under a 16-bit policy) and
// the backward's dK, dV sums in fp32:
//
//	fwd = (n−1)·kv·e      bwd = (n−1)·kv·e + n·kv·4
//
// plus fwd again when the backward recomputes the forward (again). The
// engine's comm_bytes.cp counts a send's and a receive's payload alike:
// 2·(fwd + bwd) per layer and micro-batch.
func CPRingBytes(n int, kv, e float64, again bool) (fwd, bwd float64) {
	if n <= 1 {
		return 0, 0
	}
	f := float64(n-1) * kv * e
	bwd = f + float64(n)*kv*4
	if again {
		bwd += f
	}
	return f, bwd
}
