package plan

import "fmt"

// EngineRefusals is the one table of what the Trellis engine (trellis
// train) runs: one line per rule that model m under plan p breaks, naming
// the keys and the rule; none when the engine runs it. The engine's job
// check refuses a plan with these lines, and the planner's engineRuns —
// whether a plan on a cluster of engine ranks (engine_stash) is costed
// with the engine's own memory formulas and may be recommended there —
// is this table's verdict, so the two cannot drift.
//
// The engine composes every mechanism with every other: dp with ZeRO 0–3
// and any pp schedule (gpipe, 1f1b, interleaved, zb-h1), tp ± sp with
// every schedule, recomputation none/selective/full, flash on or off,
// fp32, bf16, fp16 and fp8 (train.fp8_recipe), and cp with all of them (ring attention, which
// keeps log-sum-exps whatever flash says). Shape rules (tp dividing the
// heads, layers for every pipeline stage, micro-batch counts for a
// schedule, 2·cp dividing the sequence) are the model's and the
// schedule's, checked where the shapes are known.
//
// A Llama-family model runs when its block is the engine's Llama
// (arch.Llama: RMSNorm, RoPE, grouped-query attention, SwiGLU, tied or
// untied head): no biases, heads of hidden/heads channels, an even head
// size (RoPE rotates channel pairs).
//
// A Llama with routed experts runs when its MoE layers are the engine's
// (arch's moe.go): softmax router scores used as the gates (or sigmoid
// scores normalised over the chosen experts), GShard's
// capacity or dropless, shared experts, dense-first layers and an MoE
// layer every moe_every, DeepSeek-V3's auxiliary-loss-free selection
// bias (SelectionBias: b added to the scores for the top-k alone, b_e +=
// u·sign(mean load − load_e) after each step on the step's exact loads
// over every rank; model.router_expert_bias); no learned router or expert
// biases (GPT-OSS's RouterBias, ExpertBias), no shared-expert gate, no
// group-limited routing; under tp > 1 (with or without sp; Megatron-Core
// requires sp, so the planner does on other clusters) every expert and
// the shared one is split as the dense SwiGLU, etp = tp, the router
// replicated and routing the whole micro-batch on every tensor rank; under cp > 1 each rank routes
// its share of every sequence with the micro-batch's capacity and aux
// loss, decided over the group (model's moecp.go). Expert parallelism (ep > 1, etp = tp) runs with capacity or
// dropless routing (dispatch buffers sized by arch's ExpertRows: the
// capacity's bound, or dropless every token of the group to one rank's
// experts) when ep divides the experts and dp (the ep group is ep
// consecutive dp ranks, the expert-data-parallel group the dp ranks of
// one ep index, and every cp index with them), with every ZeRO stage, pp,
// cp and every precision the MoE layer runs.
//
// Not run yet:
//
//	model        a GPT block other than GPT-2's (LayerNorm, a GELU MLP of
//	             4·hidden, one key/value head per head, a tied head); a
//	             Llama with biases or a head_dim other than hidden/heads
//	model        multi-head latent attention; learned router or expert
//	             biases (GPT-OSS's), a shared-expert gate, group-limited
//	             routing
//	ep           a pipeline stage without an MoE block
//	etp          other than 1 without tp, or tp with it (Megatron's
//	             etp < tp folds tensor-parallel ranks into ep groups)
//	schedule     dualpipe (dualpipev runs)
//	ep_overlap   without ep > 1, or with pp, tp or cp > 1, or ZeRO-3
func EngineRefusals(m Model, p Plan) []string {
	var out []string
	switch {
	case m.Family == Llama:
		if m.AttnBias || m.MLPBias {
			out = append(out, fmt.Sprintf("model %s: attention_bias=%v, mlp_bias=%v: the engine's Llama has no biases", m.Name, m.AttnBias, m.MLPBias))
		}
		if m.Heads > 0 && (m.HD()*m.Heads != m.Hidden || m.HD()%2 != 0) {
			out = append(out, fmt.Sprintf("model %s: head_dim=%d: the engine's Llama heads are hidden/heads wide (%d·%d ≠ %d) and even", m.Name, m.HD(), m.Heads, m.HD(), m.Hidden))
		}
	case m.gated() || m.KVHeads != m.Heads || m.FFN != 4*m.Hidden || !m.Tied:
		out = append(out, fmt.Sprintf("model %s: the engine runs GPT-2 blocks (LayerNorm, a GELU MLP of 4·hidden, one key/value head per head, the head tied to the embedding)", m.Name))
	}
	if m.MLA != nil {
		out = append(out, fmt.Sprintf("model %s: the engine does not run multi-head latent attention", m.Name))
	}
	out = append(out, engineMoERefusals(m, p)...)
	if m.moe() && p.Precision == FP8 {
		out = append(out, fmt.Sprintf("model %s, precision=fp8: the engine's fp8 recipes quantise the dense linears only, not the experts' grouped GEMMs", m.Name))
	}
	out = append(out, engineEPRefusals(m, p)...)
	out = append(out, engineEPOverlapRefusals(p)...)
	if p.Schedule == DualPipe {
		out = append(out, "schedule=dualpipe: the engine does not run the bidirectional DualPipe (two copies of the parameters); it runs its V-shaped form, schedule=dualpipev")
	}
	return out
}

// engineMoERefusals are EngineRefusals' lines for a model's experts: what
// of plan.MoE the engine's MoE layer does not compute.
func engineMoERefusals(m Model, p Plan) []string {
	if !m.moe() {
		return nil
	}
	e := *m.MoE
	var out []string
	if m.Family != Llama {
		out = append(out, fmt.Sprintf("model %s: the engine's experts replace a Llama block's SwiGLU", m.Name))
	}
	if e.Score != "" && e.Score != "softmax" && e.Score != "sigmoid" {
		out = append(out, fmt.Sprintf("model %s: moe.score=%s: the engine's router scores by softmax or sigmoid", m.Name, e.Score))
	}
	if e.RouterBias || e.ExpertBias || e.SharedGate {
		out = append(out, fmt.Sprintf("model %s: router_bias=%v, expert_bias=%v, shared_gate=%v: the engine's MoE layer has no learned biases or shared-expert gate (it runs DeepSeek-V3's selection bias, moe.selection_bias)", m.Name, e.RouterBias, e.ExpertBias, e.SharedGate))
	}
	if e.Groups > 1 || e.GroupTopK > 0 {
		out = append(out, fmt.Sprintf("model %s: moe.groups=%d, group_top_k=%d: the engine does not limit routing to groups", m.Name, e.Groups, e.GroupTopK))
	}
	if e.SharedFFN%e.FFN != 0 {
		out = append(out, fmt.Sprintf("model %s: moe.shared_ffn=%d: the engine's shared experts are whole experts of ffn=%d", m.Name, e.SharedFFN, e.FFN))
	}
	if _, etp := p.Experts(); p.TP > 1 && etp != p.TP {
		out = append(out, fmt.Sprintf("tp=%d with experts and etp=%d: the engine splits every expert as the dense SwiGLU over the tensor-parallel group (expert tensor parallelism with etp = tp); write etp=%d", p.TP, etp, p.TP))
	}
	return out
}

// engineEPRefusals are EngineRefusals' lines for expert parallelism: the
// engine carves ep groups of ep consecutive data-parallel ranks out of
// the dp axis at each tp and cp index (etp = tp), so ep divides dp and
// the experts (its dispatch buffers hold arch's ExpertRows bound,
// capacity or dropless); the expert-data-parallel group spans cp.
func engineEPRefusals(m Model, p Plan) []string {
	ep, etp := p.Experts()
	var out []string
	if etp > 1 && etp != p.TP {
		out = append(out, fmt.Sprintf("etp=%d with tp=%d: the engine's expert tensor parallelism is the tensor-parallel group's (etp = tp)", etp, p.TP))
	}
	if ep <= 1 {
		return out
	}
	if !m.moe() {
		return append(out, fmt.Sprintf("ep=%d without routed experts: expert parallelism splits the experts of model %s, which has none", ep, m.Name))
	}
	if m.MoE.Experts%ep != 0 {
		out = append(out, fmt.Sprintf("ep=%d does not divide moe.experts=%d (each ep rank holds experts/ep of them)", ep, m.MoE.Experts))
	}
	if p.DP%ep != 0 {
		out = append(out, fmt.Sprintf("ep=%d does not divide dp=%d: the engine's ep groups are ep consecutive data-parallel ranks", ep, p.DP))
	}
	return out
}

// engineEPOverlapRefusals are EngineRefusals' lines for ep_overlap=on:
// the pair's forward and backward may issue collectives only on their
// own ep groups, but for the backward's gradient reductions (see
// EngineRefusals).
func engineEPOverlapRefusals(p Plan) []string {
	if !p.EPOverlap {
		return nil
	}
	var out []string
	if ep, _ := p.Experts(); ep <= 1 {
		out = append(out, "ep_overlap=on needs ep > 1: it hides expert parallelism's all-to-alls")
	}
	if p.PP > 1 {
		out = append(out, fmt.Sprintf("ep_overlap=on with pp=%d: the engine pairs a one-stage 1F1B's forward and backward (pp=1); a pipeline's transfers would run inside the pair", p.PP))
	}
	if p.TP > 1 {
		out = append(out, fmt.Sprintf("ep_overlap=on with tp=%d: both passes of the pair would issue the tensor-parallel group's collectives, in an order that depends on timing", p.TP))
	}
	if p.CP > 1 {
		out = append(out, fmt.Sprintf("ep_overlap=on with cp=%d: both passes of the pair would run the ring attention on the cp group", p.CP))
	}
	if p.ZeRO >= 3 {
		out = append(out, fmt.Sprintf("ep_overlap=on with zero=%d: the forward's weight gathers would meet the backward's reduce-scatters on the dp group in an order that depends on timing (zero ≤ 2)", p.ZeRO))
	}
	return out
}
