package arch

import (
	"fmt"
	"math"
)

// Mixture of experts (arch = "llama" with experts > 0): the MLP of an MoE
// layer is a router and E routed SwiGLU experts of width F_e (plus, with
// shared_experts = s, one shared SwiGLU of width s·F_e that every token
// passes through). For the n = B·T tokens z (n,C) of a micro-batch
// (z = RMS₂(res2)):
//
//	p   = softmax(z·W_routerᵀ)                  (n,E), W_router (E,C)
//	K_t = top_k(p_t)                            k experts, ties to the lower index
//	y_t = Σ_{e ∈ K_t, kept} p_{t,e}·FFN_e(z_t) + FFN_shared(z_t)
//	out = res2 + drop(y)
//
// The gates are the softmax scores themselves (Switch, GShard's first
// expert, Qwen-MoE without norm_topk_prob): no renormalisation over the
// chosen k. With capacity_factor c > 0 each expert takes at most
// cap = ⌈c·n·k/E⌉ of the micro-batch's assignments, first choices first
// (every token's top-1 in token order, then every top-2, …: GShard's
// priority); an assignment past its expert's capacity is dropped (its term
// is 0: the token passes through the residual). c = 0 is dropless. The
// auxiliary load-balancing loss (Switch, Fedus et al. 2022) of a layer is
//
//	L_aux = α·E·Σ_e f_e·P_e,   f_e = |{(t,j): K_t[j] = e}|/(n·k),   P_e = Σ_t p_{t,e}/n
//
// (f_e counted before dropping, without gradient), added to the
// micro-batch's loss for every MoE layer; α is aux_loss.
//
// With router_score = "sigmoid" (DeepSeek-V3) the scores are
// s = σ(z·W_routerᵀ), the top k chosen by s as above, and the gates the
// chosen scores normalised to sum to 1, g_{t,j} = s_{t,K_t[j]}/Σ_i s_{t,K_t[i]};
// the aux loss takes P_e as the mean of the normalised scores
// s_{t,e}/Σ_e' s_{t,e'} (DeepSeek-V3's balance loss, over the micro-batch).
//
// With router_expert_bias (DeepSeek-V3's auxiliary-loss-free balancing,
// Wang et al. 2024) each MoE layer keeps a per-expert bias b (E fp32
// values, a buffer, not a trained parameter, starting at 0) added to the
// scores for the selection only:
//
//	K_t = top_k(p_t + b)                        ties to the lower index
//	g_{t,j} = p_{t,K_t[j]}                      (sigmoid: normalised over the k as above)
//
// and after every optimizer step
//
//	b_e += u·sign(mean_e'(load_e') − load_e)
//
// with load_e the assignments expert e got over the whole step (every
// micro-batch of every data-parallel rank, before capacity) and u
// router_bias_update_rate: an overloaded expert's bias falls, an
// underloaded one's rises, a balanced one's stays.
//
// Layer i is an MoE layer when i ≥ dense_first and (i − dense_first) is a
// multiple of moe_every (0 or 1: every layer); the others keep the dense
// SwiGLU of ffn_hidden.

// MoELayer says whether block l (0-based) has routed experts.
func (c Config) MoELayer(l int) bool {
	if c.Experts <= 0 || l < c.DenseFirst {
		return false
	}
	return (l-c.DenseFirst)%max(1, c.MoEEvery) == 0
}

// MoELayers counts the MoE blocks among [lo, hi).
func (c Config) MoELayers(lo, hi int) int {
	n := 0
	for l := lo; l < hi; l++ {
		if c.MoELayer(l) {
			n++
		}
	}
	return n
}

// ExpertWidth is F_e, a routed expert's SwiGLU width (expert_ffn_hidden,
// or the dense FFNWidth when 0).
func (c Config) ExpertWidth() int {
	if c.ExpertFFN > 0 {
		return c.ExpertFFN
	}
	return c.FFNWidth()
}

// SharedWidth is the shared experts' SwiGLU width, shared_experts·F_e.
func (c Config) SharedWidth() int { return c.SharedExperts * c.ExpertWidth() }

// ExpertLocal is the routed and the shared experts' SwiGLU widths on part
// p: F_e/t and F_s/t (moeParams' tensor-parallel split).
func (c Config) ExpertLocal(p Part) (fe, fs int) {
	t := p.Degree()
	return c.ExpertWidth() / t, c.SharedWidth() / t
}

// DefaultBiasRate is router_bias_update_rate's default (Megatron-Core's
// moe_router_bias_update_rate).
const DefaultBiasRate = 1e-3

// BiasRate is u, the expert bias's step (0 without the bias).
func (c Config) BiasRate() float64 {
	if !c.RouterExpertBias {
		return 0
	}
	if c.RouterBiasUpdateRate > 0 {
		return c.RouterBiasUpdateRate
	}
	return DefaultBiasRate
}

// SigmoidRouter says whether the router scores by sigmoid.
func (c Config) SigmoidRouter() bool { return c.RouterScore == "sigmoid" }

// Capacity is an expert's capacity for n tokens, ⌈c·n·k/E⌉, or 0 when
// dropless.
func (c Config) Capacity(n int) int {
	if c.CapacityFactor <= 0 || c.Experts <= 0 {
		return 0
	}
	return int(math.Ceil(c.CapacityFactor * float64(n) * float64(c.TopK) / float64(c.Experts)))
}

// Routed is R, the rows of a micro-batch's dispatched tokens an MoE layer
// holds for the n tokens of a rank: n·k dropless, else at most
// min(n·k, E·cap), the capacity cap that of the micro-batch's n·cp tokens
// (under context parallelism, cp > 1, the rank holds n of them and an
// expert's capacity is counted over the whole micro-batch).
func (c Config) Routed(n, cp int) int {
	r := n * c.TopK
	if cap := c.Capacity(n * max(1, cp)); cap > 0 {
		r = min(r, c.Experts*cap)
	}
	return r
}

// ExpertRows is the rows an MoE layer's experts on one rank hold for n
// tokens a rank: Routed(n, cp), or under expert parallelism (ep > 1) the most
// the rank can receive from its group, the least of two bounds (cap the
// micro-batch's capacity, as in Routed):
//
//	E·cap             each of its E/ep experts takes at most cap rows from
//	                  each of the ep ranks (capacity routing only)
//	ep·n·min(k, E/ep) every token of every ep rank routed to this rank's
//	                  experts, each at most min(k, E/ep) times (a token's
//	                  k experts are distinct): the dropless bound, which
//	                  routing every token to the same k experts attains
//	                  when k ≤ E/ep
//
// The engine sizes its dispatch buffers and the experts' saved rows by
// it, so dropless routing's worst case always fits.
func (c Config) ExpertRows(n, ep, cp int) int {
	if ep > 1 {
		r := ep * n * min(c.TopK, c.Experts/ep)
		if cap := c.Capacity(n * max(1, cp)); cap > 0 {
			r = min(r, c.Experts*cap)
		}
		return r
	}
	return c.Routed(n, cp)
}

// moeKeys checks the MoE keys: only a Llama has experts; with experts > 0
// top_k is in [1, experts], the widths and counts non-negative,
// dense_first at most layers, capacity_factor and aux_loss finite and
// non-negative, router_score softmax or sigmoid, router_bias_update_rate
// in [0, 1] and only with router_expert_bias; with experts = 0 none is set.
func (c Config) moeKeys() []error {
	var errs []error
	if c.Experts < 0 {
		return []error{fmt.Errorf("model.experts=%d must be positive (or 0: a dense model)", c.Experts)}
	}
	if c.Experts == 0 {
		set := []struct {
			name string
			on   bool
		}{{"top_k", c.TopK != 0}, {"expert_ffn_hidden", c.ExpertFFN != 0}, {"shared_experts", c.SharedExperts != 0},
			{"moe_every", c.MoEEvery != 0}, {"dense_first", c.DenseFirst != 0}, {"capacity_factor", c.CapacityFactor != 0},
			{"router_score", c.RouterScore != ""}, {"aux_loss", c.AuxLoss != 0},
			{"router_expert_bias", c.RouterExpertBias}, {"router_bias_update_rate", c.RouterBiasUpdateRate != 0}}
		for _, s := range set {
			if s.on {
				errs = append(errs, fmt.Errorf("model.%s is set without model.experts (a dense model has no router)", s.name))
			}
		}
		return errs
	}
	if !c.IsLlama() {
		errs = append(errs, fmt.Errorf("model.experts=%d: experts replace a Llama block's SwiGLU (set model.arch=\"llama\")", c.Experts))
	}
	if c.TopK < 1 || c.TopK > c.Experts {
		errs = append(errs, fmt.Errorf("model.top_k=%d must be in [1, model.experts=%d]", c.TopK, c.Experts))
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"expert_ffn_hidden", c.ExpertFFN}, {"shared_experts", c.SharedExperts}, {"moe_every", c.MoEEvery}, {"dense_first", c.DenseFirst}} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("model.%s=%d must not be negative", f.name, f.v))
		}
	}
	if c.DenseFirst > c.Layers {
		errs = append(errs, fmt.Errorf("model.dense_first=%d exceeds model.layers=%d", c.DenseFirst, c.Layers))
	}
	if !(c.CapacityFactor >= 0 && c.CapacityFactor <= 1000) {
		errs = append(errs, fmt.Errorf("model.capacity_factor=%v: want 0 (dropless) or a factor in (0, 1000]", c.CapacityFactor))
	}
	if !(c.AuxLoss >= 0 && c.AuxLoss <= 1e3) {
		errs = append(errs, fmt.Errorf("model.aux_loss=%v: want a coefficient in [0, 1000]", c.AuxLoss))
	}
	if u := c.RouterBiasUpdateRate; !(u >= 0 && u <= 1) {
		errs = append(errs, fmt.Errorf("model.router_bias_update_rate=%v: want a step in (0, 1] (0: the default %g)", u, DefaultBiasRate))
	} else if u != 0 && !c.RouterExpertBias {
		errs = append(errs, fmt.Errorf("model.router_bias_update_rate=%v is set without model.router_expert_bias=true", u))
	}
	switch c.RouterScore {
	case "", "softmax", "sigmoid":
	default:
		errs = append(errs, fmt.Errorf("model.router_score=%q: want softmax or sigmoid", c.RouterScore))
	}
	return errs
}

// moeParams are an MoE block's MLP tensors (after post_attention_layernorm):
//
//	mlp.gate.weight                    (E,C)       the router
//	mlp.experts.gate_up_proj           (E,2F_e,C)  expert e's rows [gate | up]
//	mlp.experts.down_proj              (E,C,F_e)
//	mlp.shared_experts.gate_proj.weight (F_s,C), up_proj (F_s,C), down_proj (C,F_s)   with shared experts
//
// The experts' weights are two tensors (Llama 4's and GPT-OSS's fused
// layout, (out, in) per expert), so that one grouped GEMM reads every
// expert's matrix at a fixed stride.
//
// Under tensor parallelism (t > 1) every expert, and the shared one, is
// split as the dense SwiGLU is (Megatron-Core's expert tensor parallelism
// with etp = tp): rank r holds columns [r·F_e/t, (r+1)·F_e/t) of each
// expert's gate and up (the view (E, 2, F_e, C) split on F_e) and the same
// input columns of its down_proj; the router is replicated.
func (c Config) moeParams(n func(string) string) []tensorSpec {
	C, E, Fe, Fs := c.Hidden, c.Experts, c.ExpertWidth(), c.SharedWidth()
	gu, down := shardView(n("mlp.experts.gate_up_proj"), []int{E, 2, Fe, C}, 2, E, 2*Fe, C), shard(n("mlp.experts.down_proj"), 2, E, C, Fe)
	gu.expert, down.expert = true, true
	t := []tensorSpec{rep(n("mlp.gate.weight"), E, C), gu, down}
	if Fs > 0 {
		t = append(t, shard(n("mlp.shared_experts.gate_proj.weight"), 0, Fs, C),
			shard(n("mlp.shared_experts.up_proj.weight"), 0, Fs, C),
			shard(n("mlp.shared_experts.down_proj.weight"), 1, C, Fs))
	}
	return t
}

// moeSaved declares what an MoE layer's MLP keeps (after the block's
// post_attention_layernorm; n = B·T the rank's tokens (B·T/cp of each sequence under cp), R = Routed(n, cp)):
//
//	mlp.router.probs     (n,E) the router's scores (softmax or sigmoid); the routing (top-k,
//	                     capacity, permutation) is recomputed from it
//	mlp.experts.x        (R,C) operand, the dispatched tokens, expert-major
//	mlp.experts.gate_up  (R,2F_e) operand, SwiGLU's input
//	mlp.experts.act      (R,F_e) operand, down_proj's input
//	mlp.experts.y        (R,C) the experts' outputs, for the gates' gradient
//	mlp.shared.gate_up   (n,2F_s) operand, mlp.shared.act (n,F_s) operand   with shared experts
//
// Under expert parallelism x, gate_up and act are the rank's experts'
// rows received from the group (ExpertRows), y the rank's own tokens'
// outputs sent back (R). Under tensor parallelism every rank routes the
// whole micro-batch (n = B·T, its tokens gathered under sp) and holds
// its F_e/t and F_s/t columns (ExpertLocal); y is its partial output.
func (c Config) moeSaved(d Dims) []Saved {
	n := float64(d.B) * float64(d.T)
	R, Rx := float64(c.Routed(d.B*d.T, d.CP)), float64(c.ExpertRows(d.B*d.T, d.Part.EPDegree(), d.CP))
	fe, fs := c.ExpertLocal(d.Part)
	C, E, Fe, Fs := float64(c.Hidden), float64(c.Experts), float64(fe), float64(fs)
	s := []Saved{
		{Name: "mlp.router.probs", Class: Exact, Elems: n * E},
		{Name: "mlp.experts.x", Class: Operand, Elems: Rx * C},
		{Name: "mlp.experts.gate_up", Class: Operand, Elems: 2 * Rx * Fe},
		{Name: "mlp.experts.act", Class: Operand, Elems: Rx * Fe},
		{Name: "mlp.experts.y", Class: Exact, Elems: R * C},
	}
	if Fs > 0 {
		s = append(s, Saved{Name: "mlp.shared.gate_up", Class: Operand, Elems: 2 * n * Fs},
			Saved{Name: "mlp.shared.act", Class: Operand, Elems: n * Fs})
	}
	return s
}

// MoEWorkspace are an MoE layer's scratch sizes for micro-batches of B
// sequences (n = B·T the rank's tokens, R = Routed(n, cp), Rx = ExpertRows(n, ep, cp)), carved in
// this order:
//
//	F32    rows  max(R,n)·C  the backward's dispatched output gradient, then
//	             input gradient; the forward's combine (n,C)
//	       dact  Rx·F_e      (the forward's fp32 act under 16-bit)
//	       dgu   2·Rx·F_e    (the forward's fp32 gate_up under 16-bit)
//	       dp    n·E         the router's probability gradient
//	       gates 2·n·k       every assignment's gate and its gradient
//	       ep > 1: two Rx·C  the experts' rows in the group's order and in
//	             expert order (received tokens, outputs, gradients), and
//	             2E, the row counts sent to and received from each rank
//	Half   max(Rx·max(C, 2F_e), n·E) a grouped GEMM's (or the router's)
//	             rounded output gradient, under a 16-bit policy; with
//	             ep > 1 R·C + Rx·C more, the tokens sent and received
//	Route  (int32) 2·n·k + 4E + 1: every assignment's expert and row, the
//	             experts' loads before capacity and their row offsets, the
//	             aux loss's score sums (E float64);
//	             with ep > 1 Rx + E + 1 more, the received rows' places
//	             in expert order and the local experts' offsets; with
//	             router_expert_bias E a MoE block of the model (fp32, 4
//	             bytes as an int32), every block's expert bias
//	cp > 1 F32 (cp+1)·n·k + E: the rank's choices and the context-parallel
//	             group's gathered (for the micro-batch's capacity), the aux
//	             loss's score sums summed over the group; Route 2E more,
//	             the micro-batch's loads and kept rows per expert
type MoEWorkspace struct{ F32, Half, Route float64 }

// MoEScratch sizes an MoE layer's scratch on part d.Part (zero for a
// dense model).
func (c Config) MoEScratch(d Dims, half bool) MoEWorkspace {
	if c.Experts <= 0 || c.MoELayers(0, c.Layers) == 0 {
		return MoEWorkspace{}
	}
	ep := d.Part.EPDegree()
	n := float64(d.B) * float64(d.T)
	R, Rx := float64(c.Routed(d.B*d.T, d.CP)), float64(c.ExpertRows(d.B*d.T, ep, d.CP))
	fe, _ := c.ExpertLocal(d.Part)
	C, E, Fe, k := float64(c.Hidden), float64(c.Experts), float64(fe), float64(c.TopK)
	w := MoEWorkspace{F32: max(R, n)*C + 3*Rx*Fe + n*E + 2*n*k, Route: 2*n*k + 4*E + 1}
	if ep > 1 {
		w.F32 += 2*Rx*C + 2*E
		w.Route += Rx + E + 1
	}
	if c.RouterExpertBias {
		w.Route += E * float64(c.MoELayers(0, c.Layers))
	}
	if cp := float64(d.CP); cp > 1 {
		w.F32 += (cp+1)*n*k + E
		w.Route += 2 * E
	}
	if half {
		w.Half = max(Rx*max(C, 2*Fe), n*E)
		if ep > 1 {
			w.Half += R*C + Rx*C
		}
	}
	return w
}

// moeActiveParams is the parameters a token uses in an MoE layer beyond
// its attention and norms: the router's E·C, k experts' 3·C·F_e and the
// shared 3·C·F_s.
func (c Config) moeActiveParams() float64 {
	C := float64(c.Hidden)
	return float64(c.Experts)*C + float64(c.TopK)*3*C*float64(c.ExpertWidth()) + 3*C*float64(c.SharedWidth())
}
