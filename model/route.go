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
	clear(r.load)
	fill := r.offs[1:] // expert e's rows so far, then prefix sums
	clear(r.offs)
	for j := 0; j < K; j++ {
		for t := 0; t < N; t++ {
			i := t*K + j
			e := r.experts[i]
			r.load[e]++
			if cap > 0 && int(fill[e]) >= cap {
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
// load_e/(N·K), P_e the mean probability of expert e; a sigmoid router's
// the mean of its scores normalised over the experts).
func auxLoss(r routing, probs []float32, N, E, K int, alpha float64, sigmoid bool) float64 {
	P := make([]float64, E) // E values: the layer's experts
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
	var l float64
	for e := 0; e < E; e++ {
		l += auxF(r, e, N, K) * P[e] / float64(N)
	}
	return alpha * float64(E) * l
}

// auxF is f_e = load_e/(N·K), the fraction of the assignments expert e got.
func auxF(r routing, e, N, K int) float64 { return float64(r.load[e]) / float64(N*K) }
