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
// fp32, bf16, fp16 and fp8 (train.fp8_recipe). Shape rules (tp dividing the heads, layers for
// every pipeline stage, micro-batch counts for a schedule) are the
// model's and the schedule's, checked where the shapes are known.
//
// A Llama-family model runs when its block is the engine's Llama
// (arch.Llama: RMSNorm, RoPE, grouped-query attention, SwiGLU, tied or
// untied head): no biases, heads of hidden/heads channels, an even head
// size (RoPE rotates channel pairs).
//
// Not run yet:
//
//	model        a GPT block other than GPT-2's (LayerNorm, a GELU MLP of
//	             4·hidden, one key/value head per head, a tied head); a
//	             Llama with biases or a head_dim other than hidden/heads
//	cp           context parallelism
//	model        experts (MoE) or multi-head latent attention
//	ep, etp      expert parallelism
//	schedule     dualpipe, dualpipev
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
	if p.CP != 1 {
		out = append(out, fmt.Sprintf("cp=%d: the engine does not implement context parallelism", p.CP))
	}
	if m.MoE != nil || m.MLA != nil {
		out = append(out, fmt.Sprintf("model %s: the engine does not run experts or multi-head latent attention", m.Name))
	}
	if ep, etp := p.Experts(); ep > 1 || etp > 1 {
		out = append(out, fmt.Sprintf("ep=%d, etp=%d: the engine does not implement expert parallelism", ep, etp))
	}
	if p.Schedule == DualPipe || p.Schedule == DualPipeV {
		out = append(out, fmt.Sprintf("schedule=%s: the engine does not run DualPipe schedules", p.Schedule))
	}
	return out
}
