package model

import (
	"trellis/ops"
	"trellis/rng"
	"trellis/tensor"
)

// moeLayer is an MoE layer's MLP (arch's moe.go) on the n = B·T tokens z
// of a micro-batch, E experts of width F_e, k slots a token, an optional
// shared SwiGLU of width F_s:
//
//	p   = softmax(z·W_routerᵀ)                      (n,E) saved
//	x   = dispatch(z)                               (R,C) rows grouped by expert
//	gu  = x_e·W_gu,eᵀ, act = SiLU(gate)⊙up           one grouped GEMM over the experts
//	y   = act_e·W_down,eᵀ                            (R,C) one grouped GEMM
//	br  = Σ_j g_{t,j}·y[row(t,j)] + shared(z)       in slot order j (token order)
//	out = res + drop(br)
//
// and its backward, for dbr = ∂L/∂br:
//
//	dy[row(t,j)] = g_{t,j}·dbr_t,   dg_{t,j} = dbr_t·y[row(t,j)]
//	dact = dy_e·W_down,e, dW_down,e += dy_eᵀ·act_e; dgu by SwiGLU's rule
//	dx = dgu_e·W_gu,e,    dW_gu,e += dgu_eᵀ·x_e;    dz_t = Σ_j dx[row(t,j)]
//	dp_{t,e} = Σ_j [K_t[j] = e]·dg_{t,j} + w·α·E·f_e/n    (the aux loss's, w the loss weight)
//	dlogits = p⊙(dp − Σ p·dp); dz += dlogits·W_router, dW_router += dlogitsᵀ·z
//
// Under tensor parallelism (t ranks) the layer is split as the dense
// SwiGLU is (Megatron-Core's expert tensor parallelism, etp = tp): z is
// entered through f (gathered under sp), every rank routes the whole
// micro-batch with the replicated router (the same scores, choices and
// drops on every rank, and as on one device), computes its F_e/t columns
// of every expert (and F_s/t of the shared one), and the partial branch
// leaves through g (ReduceFromTP, or ScatterSeq under sp). In the
// backward the gates' gradients, dbr·y with y partial, are summed over
// the group (n·k values); the router's input gradient is added by rank 0
// alone before f's reduction, its weight gradient is the same on every
// rank (replicated, no reduction).
//
// The routing (top-k, capacity, rows) is recomputed from the saved p in
// the backward. The GEMMs read their operands in the policy's compute
// dtype (x, gu, act saved as operands; gradients rounded before the
// GEMMs), accumulating in fp32, as every linear layer does. A split
// backward computes the layer's weight gradients at once (nothing of it
// is deferred).
type moeLayer struct {
	C, E, K, Fe, Fs int
	alpha           float64
	sigmoid         bool   // sigmoid scores, the chosen ones normalised into the gates
	cfg             Config // for the capacity of a pass's tokens
}

// moeActs are an MoE layer's saved activations (arch's moeSaved).
type moeActs struct {
	probs      []float32  // (n,E)
	x, gu, act tensor.Buf // (R,C), (R,2F_e), (R,F_e)
	y          []float32  // (R,C)
	sgu, sact  tensor.Buf // (n,2F_s), (n,F_s); empty without shared experts
}

// moeWeights are an MoE layer's weights (arch's moeParams); sgu is the
// shared experts' gate and up as one (2F_s, C) matrix.
type moeWeights struct{ router, gu, down, sgu, sdown tensor.Buf }

// moeGrads are their gradient buffers.
type moeGrads struct{ router, gu, down, sgu, sdown []float32 }

// moeScratch is the MoE layer's scratch (arch's MoEWorkspace).
type moeScratch struct {
	rows, dact, dgu, dp, gates, dgates []float32
	dy                                 tensor.Buf // 16-bit, nil in fp32
	half                               []uint16   // the 16-bit scratch, carved into dy (and sendX, recvX)
	r                                  routing
	gemms                              []ops.GEMM // (E) a grouped call's products
	// Expert parallelism (ep.go): the experts' rows in the group's order
	// (grp) and in expert order (exp), the counts exchanged, the tokens
	// sent and received, each received row's place in expert order and the
	// local experts' row offsets.
	grp, exp, counts []float32
	sendX, recvX     tensor.Buf
	perm, local      []int32
	// Context parallelism (moecp.go): the rank's choices then the group's
	// gathered ((cp+1)·n·k), the aux loss's score sums on their way over
	// the group (E), the micro-batch's kept rows per expert (E); the aux
	// loss's score sums (E, float64).
	cpSel, cpP []float32
	cpFill     []int32
	auxP       []float64
}

func newMoE(c Config, p Part) moeLayer {
	fe, fs := c.ExpertLocal(p)
	return moeLayer{C: c.Hidden, E: c.Experts, K: c.TopK, Fe: fe, Fs: fs, alpha: c.AuxLoss,
		sigmoid: c.SigmoidRouter(), cfg: c}
}

// grouped runs one GEMM per expert with rows, built by mk from the
// expert's row range, as one grouped call.
func (m *GPT) grouped(r routing, mk func(e, lo, hi int) ops.GEMM) {
	gs := m.w.moe.gemms[:0]
	for e := range len(r.offs) - 1 {
		if lo, hi := r.rowsOf(e); hi > lo {
			gs = append(gs, mk(e, lo, hi))
		}
	}
	m.k.GroupedGemm(gs)
}

// moeRounded is x in the compute dtype: x itself in fp32, else its
// rounding into the MoE layer's 16-bit scratch.
func (m *GPT) moeRounded(x []float32) tensor.Buf {
	if !m.d.half {
		return tensor.F32s(x)
	}
	h := m.w.moe.dy.Head(len(x))
	m.k.Encode(h, x)
	return h
}

// expert is expert e's matrix of rows×cols in a stacked (E, rows, cols) weight.
func expert(w tensor.Buf, e, rows, cols int) tensor.Buf { return w.Slice(e*rows*cols, (e+1)*rows*cols) }

func expertF(g []float32, e, rows, cols int) []float32 { return g[e*rows*cols : (e+1)*rows*cols] }

// routeOf routes the micro-batch from the saved scores, selecting by
// them plus block layer's expert bias (bias.go; it changes only between
// steps, so the backward selects what the forward did), a sigmoid
// router's gates normalised over each token's k. Under context
// parallelism the capacity is the micro-batch's, decided over the group
// (cpRoute).
func (l moeLayer) routeOf(m *GPT, a moeActs, n, layer int) (routing, error) {
	r := m.w.moe.r
	if m.d.cp > 1 {
		choose(&r, a.probs, m.biasOf(layer), n, l.E, l.K)
		if err := l.cpRoute(m, &r, n); err != nil {
			return r, err
		}
		fill(&r, n, l.E, l.K, 0, true)
	} else {
		route(&r, a.probs, m.biasOf(layer), n, l.E, l.K, l.cfg.Capacity(n))
	}
	if l.sigmoid {
		normalizeGates(r.gates, n, l.K)
	}
	return r, nil
}

// forward is out = res + drop(MoE(z)) for block layer's norm output z
// (the rank's tokens; res and out too).
func (l moeLayer) forward(m *GPT, s *Stash, a moeActs, out, res []float32, z tensor.Buf, w moeWeights, site rng.Stream, layer int) error {
	n := s.b * s.t
	C, E := l.C, l.E
	sc := &m.w.moe
	z, err := m.enter(z, n)
	if err != nil {
		return err
	}
	m.k.Gemm(ops.GEMM{Layout: ops.NT, M: n, N: E, K: C, A: z.Head(n * C), LDA: C, B: w.router, LDB: C, C: a.probs[:n*E], LDC: E})
	if l.sigmoid {
		m.k.RouterSigmoid(a.probs, a.probs, n, E)
	} else {
		m.k.RouterSoftmax(a.probs, a.probs, n, E)
	}
	r, err := l.routeOf(m, a, n, layer)
	if err != nil {
		return err
	}
	count := !s.eval && !m.rerun
	if count {
		aux, err := l.aux(m, a, r, n)
		if err != nil {
			return err
		}
		m.stats.add(layer, r, aux, l.alpha > 0 && (m.cp == nil || m.cp.Rank() == 0)) // the group's ranks share one micro-batch's loss
	}
	if m.d.ep > 1 {
		rx, err := l.forwardEP(m, a, z, w, r, n)
		if err != nil {
			return err
		}
		if count {
			m.stats.recv(layer, rx)
		}
	} else {
		if count {
			m.stats.recv(layer, r.kept())
		}
		m.k.MoEDispatch(a.x, z, r.rows, n, l.K, C)
		l.runExperts(m, a, w, r, a.y)
	}
	part := sc.rows[:n*C]
	clear(part)
	m.k.MoECombine(part, a.y, r.gates, r.rows, n, l.K, C)
	if l.Fs > 0 {
		l.sharedForward(m, a, part, z, w, n)
	}
	br, err := m.leave(part, n)
	if err != nil {
		return err
	}
	nl := m.d.tokens(n)
	if m.useDropout(s) {
		m.dropout(s, site, br, br, nl, false)
	}
	m.k.ResidualForward(out, res, br, nl*C)
	return nil
}

// runExperts is the experts' SwiGLU over the rows of a.x grouped as r
// (expert e's rows [offs[e], offs[e+1]), e a local expert), two grouped
// GEMMs, the outputs into y.
func (l moeLayer) runExperts(m *GPT, a moeActs, w moeWeights, r routing, y []float32) {
	C, Fe, sc := l.C, l.Fe, &m.w.moe
	R := r.kept()
	gu := m.out(a.gu, sc.dgu, 2*R*Fe)
	m.grouped(r, func(e, lo, hi int) ops.GEMM {
		return ops.GEMM{Layout: ops.NT, M: hi - lo, N: 2 * Fe, K: C, A: a.x.Slice(lo*C, hi*C), LDA: C,
			B: expert(w.gu, e, 2*Fe, C), LDB: C, C: gu[lo*2*Fe : hi*2*Fe], LDC: 2 * Fe}
	})
	m.keep(a.gu, gu, true)
	act := m.out(a.act, sc.dact, R*Fe)
	m.k.SwiGLUForward(act, gu, R, Fe)
	m.keep(a.act, act, false)
	m.grouped(r, func(e, lo, hi int) ops.GEMM {
		return ops.GEMM{Layout: ops.NT, M: hi - lo, N: C, K: Fe, A: a.act.Slice(lo*Fe, hi*Fe), LDA: Fe,
			B: expert(w.down, e, C, Fe), LDB: Fe, C: y[lo*C : hi*C], LDC: C}
	})
}

// sharedForward adds the shared experts' SwiGLU(z) to br (fp32 GEMM
// outputs in big under 16-bit, as the dense SwiGLU's).
func (l moeLayer) sharedForward(m *GPT, a moeActs, br []float32, z tensor.Buf, w moeWeights, n int) {
	C, Fs := l.C, l.Fs
	sgu := m.out(a.sgu, m.w.big, 2*n*Fs)
	linear{in: C, out: 2 * Fs, hp: true}.gemm(m, sgu, nil, z, w.sgu, nil, n) // hp: fp8 with experts is refused (plan.EngineRefusals)
	m.keep(a.sgu, sgu, true)
	sact := m.out(a.sact, m.w.big[2*n*Fs:], n*Fs)
	m.k.SwiGLUForward(sact, sgu, n, Fs)
	m.keep(a.sact, sact, false)
	linear{in: Fs, out: C, hp: true}.gemm(m, br, br, a.sact, w.sdown, nil, n)
}

// backward backpropagates dbr, the gradient of the branch before dropout
// (the rank's tokens), to the norm output z: it returns the rank's tokens
// of dz, ACCUMULATING the layer's weight gradients. The order of the
// terms summed into dz (the experts', the router's, the shared ones')
// is one device's on every rank; under tp f's reduction sums them last.
func (l moeLayer) backward(m *GPT, s *Stash, a moeActs, dbr []float32, z tensor.Buf, w moeWeights, g moeGrads, layer int) ([]float32, error) {
	n := s.b * s.t
	C, K := l.C, l.K
	sc := &m.w.moe
	r, err := l.routeOf(m, a, n, layer)
	if err != nil {
		return nil, err
	}
	R := r.kept()
	full, err := m.leaveBack(dbr, n)
	if err != nil {
		return nil, err
	}
	dy := sc.rows[:R*C]
	m.k.MoECombineBackward(dy, sc.dgates, full, a.y, r.gates, r.rows, n, K, C)
	if l.Fs > 0 {
		l.sharedOutBackward(m, a, full, w, g, n) // full (gath under sp) is spent after this
	}
	if m.d.t > 1 { // Σ_ranks dbr·y_rank = dbr·y
		if err := m.tp.ReduceFromTP(sc.dgates[:n*K]); err != nil {
			return nil, err
		}
	}
	if m.d.ep > 1 {
		if err := l.backwardEP(m, a, w, g, r); err != nil {
			return nil, err
		}
	} else {
		l.expertsBackward(m, a, w, g, r, dy)
	}
	dz := m.w.dln[:n*C]
	clear(dz)
	m.k.MoECombine(dz, sc.rows, nil, r.rows, n, K, C)
	if z, err = m.enter(z, n); err != nil {
		return nil, err
	}
	l.routerBackward(m, s, a, r, dz, z, w, g, n)
	if l.Fs > 0 {
		l.sharedInBackward(m, dz, z, w, g, n)
	}
	dz, wait := m.startColReduce(n)
	return dz, wait()
}

// expertsBackward backpropagates the experts' output gradients dy (their
// rows grouped as r) to their input gradients, written over dy, and
// ACCUMULATES their weight gradients: two grouped GEMMs a projection.
func (l moeLayer) expertsBackward(m *GPT, a moeActs, w moeWeights, g moeGrads, r routing, dy []float32) {
	C, Fe, sc := l.C, l.Fe, &m.w.moe
	R := r.kept()
	d := m.moeRounded(dy[:R*C])
	dact := sc.dact[:R*Fe]
	m.grouped(r, func(e, lo, hi int) ops.GEMM {
		return ops.GEMM{Layout: ops.NN, M: hi - lo, N: Fe, K: C, A: d.Slice(lo*C, hi*C), LDA: C,
			B: expert(w.down, e, C, Fe), LDB: Fe, C: dact[lo*Fe : hi*Fe], LDC: Fe}
	})
	m.grouped(r, func(e, lo, hi int) ops.GEMM {
		return ops.GEMM{Layout: ops.TN, M: C, N: Fe, K: hi - lo, A: d.Slice(lo*C, hi*C), LDA: C,
			B: a.act.Slice(lo*Fe, hi*Fe), LDB: Fe, C: expertF(g.down, e, C, Fe), LDC: Fe, Acc: true}
	})
	dgu := sc.dgu[:2*R*Fe]
	gu := m.vals(a.gu, dgu, 2*R*Fe)
	m.k.SwiGLUBackwardSet(dgu, gu, dact, R, Fe)
	d = m.moeRounded(dgu)
	dx := dy[:R*C] // dy is spent
	m.grouped(r, func(e, lo, hi int) ops.GEMM {
		return ops.GEMM{Layout: ops.NN, M: hi - lo, N: C, K: 2 * Fe, A: d.Slice(lo*2*Fe, hi*2*Fe), LDA: 2 * Fe,
			B: expert(w.gu, e, 2*Fe, C), LDB: C, C: dx[lo*C : hi*C], LDC: C}
	})
	m.grouped(r, func(e, lo, hi int) ops.GEMM {
		return ops.GEMM{Layout: ops.TN, M: 2 * Fe, N: C, K: hi - lo, A: d.Slice(lo*2*Fe, hi*2*Fe), LDA: 2 * Fe,
			B: a.x.Slice(lo*C, hi*C), LDB: C, C: expertF(g.gu, e, 2*Fe, C), LDC: C, Acc: true}
	})
}

// routerBackward adds the router's share to dz: the gates' gradients and
// the aux loss's (scaled by the stash's loss weight) into dp, back through
// the scoring and the router GEMM (into dz on tensor-parallel rank 0
// alone: the router is replicated, its input gradient the same on every
// rank, and dz is summed over the group after). A softmax router's gate is its score,
// dp_{t,e} = dg; a sigmoid router's g_j = s_j/S (S the chosen scores' sum)
// gives dp_{t,K[j]} = (dg_j − Σ_i dg_i·g_i)/S.
func (l moeLayer) routerBackward(m *GPT, s *Stash, a moeActs, r routing, dz []float32, z tensor.Buf, w moeWeights, g moeGrads, n int) {
	C, E, K := l.C, l.E, l.K
	dp := m.w.moe.dp[:n*E]
	clear(dp)
	dg := m.w.moe.dgates
	for t := 0; t < n; t++ {
		ks := r.experts[t*K : (t+1)*K]
		if !l.sigmoid {
			for j, e := range ks {
				dp[t*E+int(e)] += dg[t*K+j]
			}
			continue
		}
		var S, A float64
		for j, e := range ks {
			S += float64(a.probs[t*E+int(e)])
			A += float64(dg[t*K+j]) * float64(r.gates[t*K+j])
		}
		for j, e := range ks {
			dp[t*E+int(e)] += float32((float64(dg[t*K+j]) - A) / S)
		}
	}
	if l.alpha > 0 {
		l.auxBackward(dp, a.probs, r, float64(s.lossW), n)
	}
	if l.sigmoid {
		m.k.RouterSigmoidBackwardSet(dp, a.probs, dp, n, E)
	} else {
		m.k.RouterSoftmaxBackwardSet(dp, a.probs, dp, n, E)
	}
	d := m.moeRounded(dp)
	if m.part.Rank == 0 {
		m.k.Gemm(ops.GEMM{Layout: ops.NN, M: n, N: C, K: E, A: d, LDA: E, B: w.router, LDB: C, C: dz, LDC: C, Acc: true})
	}
	m.k.Gemm(ops.GEMM{Layout: ops.TN, M: E, N: C, K: n, A: d, LDA: E, B: z.Head(n * C), LDB: C, C: g.router, LDC: C, Acc: true})
}

// auxBackward adds w·∂L_aux/∂p to dp for the rank's n tokens: α·E·f_e/n
// for a softmax router's probabilities (f_e the micro-batch's, r.aload);
// for a sigmoid router's scores, through P_e's normalisation
// q_{t,e} = s_{t,e}/Σ_e' s_{t,e'}, α·E/n·(f_e − Σ_e' f_e'·q_{t,e'})/Σ_e' s_{t,e'}.
// Under context parallelism n is the rank's B·T/cp: the cp ranks average
// their gradients, so each takes cp times one device's α·E·f_e/(B·T).
func (l moeLayer) auxBackward(dp, probs []float32, r routing, w float64, n int) {
	E, K := l.E, l.K
	c := w * l.alpha * float64(E) / float64(n)
	for t := 0; t < n; t++ {
		p := probs[t*E : (t+1)*E]
		if !l.sigmoid {
			for e := range p {
				dp[t*E+e] += float32(c * auxF(r, e, K))
			}
			continue
		}
		var sum, fq float64
		for e, v := range p {
			sum += float64(v)
			fq += auxF(r, e, K) * float64(v)
		}
		fq /= sum
		for e := range p {
			dp[t*E+e] += float32(c * (auxF(r, e, K) - fq) / sum)
		}
	}
}

// sharedOutBackward is the shared experts' backward from the branch's
// full gradient dbr to their gate and up: down_proj's weight gradient and
// SwiGLU's, into big[n·F_s:3·n·F_s] (scratch: big, as the dense SwiGLU's)
// for sharedInBackward.
func (l moeLayer) sharedOutBackward(m *GPT, a moeActs, dbr []float32, w moeWeights, g moeGrads, n int) {
	C, Fs := l.C, l.Fs
	d := m.rounded(dbr[:n*C])
	dsact := m.w.big[:n*Fs]
	m.k.Gemm(ops.GEMM{Layout: ops.NN, M: n, N: Fs, K: C, A: d, LDA: C, B: w.sdown, LDB: Fs, C: dsact, LDC: Fs})
	m.k.Gemm(ops.GEMM{Layout: ops.TN, M: C, N: Fs, K: n, A: d, LDA: C, B: a.sact.Head(n * Fs), LDB: Fs, C: g.sdown, LDC: Fs, Acc: true})
	dsgu := m.w.big[n*Fs : 3*n*Fs]
	sgu := m.vals(a.sgu, dsgu, 2*n*Fs)
	m.k.SwiGLUBackwardSet(dsgu, sgu, dsact, n, Fs)
}

// sharedInBackward adds the shared experts' input gradient to dz and
// their gate and up's weight gradients, from sharedOutBackward's dsgu and
// the layer's (full) input z.
func (l moeLayer) sharedInBackward(m *GPT, dz []float32, z tensor.Buf, w moeWeights, g moeGrads, n int) {
	C, Fs := l.C, l.Fs
	d := m.rounded(m.w.big[n*Fs : 3*n*Fs])
	m.k.Gemm(ops.GEMM{Layout: ops.NN, M: n, N: C, K: 2 * Fs, A: d, LDA: 2 * Fs, B: w.sgu, LDB: C, C: dz, LDC: C, Acc: true})
	m.k.Gemm(ops.GEMM{Layout: ops.TN, M: 2 * Fs, N: C, K: n, A: d, LDA: 2 * Fs, B: z.Head(n * C), LDB: C, C: g.sgu, LDC: C, Acc: true})
}
