package model

// routing is one micro-batch's routing through an MoE layer (arch's
// moe.go), a pure function of the router's probabilities, so the
// backward recomputes it instead of keeping it: N tokens, K slots each,
// E experts.
type routing struct {
	experts []int32   // (N·K) token t's j-th choice, by descending probability
	rows    []int32   // (N·K) its row in expert order, −1 when dropped
	gates   []float32 // (N·K) its gate p_{t,e}
	load    []int32   // (E) assignments per expert, before capacity
	offs    []int32   // (E+1) expert e's rows are [offs[e], offs[e+1])
	// aload are the loads of the micro-batch's an tokens, which the aux
	// loss's f_e counts: load itself and N, or under context parallelism
	// the whole micro-batch's over the group (cpRoute).
	aload []int32
	an    int
}

// kept is the number of dispatched rows, offs[E].
func (r routing) kept() int { return int(r.offs[len(r.offs)-1]) }

// rowsOf is expert e's row range.
func (r routing) rowsOf(e int) (lo, hi int) { return int(r.offs[e]), int(r.offs[e+1]) }

// route fills r from probs (N,E): each token's K experts of highest
// selection score p_{t,e} + bias_e (bias nil: 0; equal scores: the lower
// expert index first), its gates the probabilities themselves, unbiased;
// then capacity cap (0: dropless) per
// expert, filled in GShard's priority — every token's first choice in
// token order, then every second choice, … —, and the kept assignments'
// rows, grouped by expert in that order.
func route(r *routing, probs, bias []float32, N, E, K, cap int) {
	choose(r, probs, bias, N, E, K)
	fill(r, N, E, K, cap, false)
	r.an = N
}

// choose is route's top-k: every token's K experts by selection score,
// the gates their probabilities.
func choose(r *routing, probs, bias []float32, N, E, K int) {
	score := func(p []float32, e int) float32 {
		if bias == nil {
			return p[e]
		}
		return p[e] + bias[e]
	}
	for t := 0; t < N; t++ {
		p := probs[t*E : (t+1)*E]
		sel := r.experts[t*K : (t+1)*K]
		for j := 0; j < K; j++ {
			best := -1
			var top float32
			for e := 0; e < E; e++ {
				if chosen(sel[:j], e) {
					continue
				}
				if s := score(p, e); best < 0 || s > top {
					best, top = e, s
				}
			}
			sel[j] = int32(best)
			r.gates[t*K+j] = p[best]
		}
	}
}

// fill is route's capacity and rows: the loads, each assignment's row
// (−1 dropped) in GShard's priority, the experts' offsets. With pre the
// drops are decided already (r.rows[i] < 0: cpRoute's) and cap is not
// applied again.
func fill(r *routing, N, E, K, cap int, pre bool) {
	clear(r.load)
	fill := r.offs[1:] // expert e's rows so far, then prefix sums
	clear(r.offs)
	for j := 0; j < K; j++ {
		for t := 0; t < N; t++ {
			i := t*K + j
			e := r.experts[i]
			r.load[e]++
			if pre && r.rows[i] < 0 || !pre && cap > 0 && int(fill[e]) >= cap {
				r.rows[i] = -1
				continue
			}
			r.rows[i] = fill[e]
			fill[e]++
		}
	}
	for e := 1; e <= E; e++ {
		r.offs[e] += r.offs[e-1]
	}
	for i, e := range r.experts {
		if r.rows[i] >= 0 {
			r.rows[i] += r.offs[e]
		}
	}
}

func chosen(sel []int32, e int) bool {
	for _, s := range sel {
		if int(s) == e {
			return true
		}
	}
	return false
}

// normalizeGates divides every token's K gates by their sum (a sigmoid
// router's).
func normalizeGates(gates []float32, N, K int) {
	for t := 0; t < N; t++ {
		g := gates[t*K : (t+1)*K]
		var S float64
		for _, v := range g {
			S += float64(v)
		}
		for j := range g {
			g[j] = float32(float64(g[j]) / S)
		}
	}
}

// auxLoss is the layer's load-balancing loss α·E·Σ_e f_e·P_e (f_e =
// aload_e/(an·K), P_e = Σ_t p_{t,e}/an the mean probability of expert e
// over the micro-batch, P its sums (auxSums); a sigmoid router's the
// mean of its scores normalised over the experts).
func auxLoss(r routing, P []float64, K int, alpha float64) float64 {
	var l float64
	for e, v := range P {
		l += auxF(r, e, K) * v / float64(r.an)
	}
	return alpha * float64(len(P)) * l
}

// auxSums sets P_e = Σ_t p_{t,e} over the N tokens of probs (N,E) (a
// sigmoid router's scores normalised over the experts first).
func auxSums(P []float64, probs []float32, N, E int, sigmoid bool) {
	clear(P)
	for t := 0; t < N; t++ {
		p := probs[t*E : (t+1)*E]
		norm := 1.0
		if sigmoid {
			var s float64
			for _, v := range p {
				s += float64(v)
			}
			norm = 1 / s
		}
		for e, v := range p {
			P[e] += float64(v) * norm
		}
	}
}

// auxF is f_e = aload_e/(an·K), the fraction of the micro-batch's
// assignments expert e got.
func auxF(r routing, e, K int) float64 { return float64(r.aload[e]) / float64(r.an*K) }
