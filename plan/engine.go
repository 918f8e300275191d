package plan

import "math"

// engineRuns says whether the Trellis engine runs p for the job's model the
// way its stash formula describes: a GPT block (FFN = 4h, one key/value head
// per head, not gated), fp32 or bf16 (whose stash the engine keeps in
// fp32 too: only its GEMM operands are rounded, into workspace), no
// recomputation, no flash attention, cp = 1.
func (j Job) engineRuns(p Plan) bool {
	m := j.Model
	return !m.gated() && m.KVHeads == m.Heads && m.FFN == 4*m.Hidden &&
		(p.Precision == FP32 || p.Precision == BF16) && p.Recompute == RecomputeNone && !p.Flash && p.CP == 1
}

// engineActivations is the Trellis engine's own stash (docs/ARCHITECTURE.md,
// "Tensor and sequence parallelism"), in bytes for one micro-batch of
// b = mbs sequences of s tokens on one of t tensor ranks, h the width, a
// the heads, n = bs (bs/t with sequence parallelism), V' = ⌈V/t⌉:
//
//	layer  4·(4nh + 4n + 12bsh/t + a·b·s²/t)
//	head   4·(2nh + 2n + bs·V' + bs) + 16bs    (last residual, ln_f, probabilities, losses; ids)
//
// Dropout masks are recomputed, so the embedding keeps nothing of its own
// (its output is the first layer's residual).
func (j Job) engineActivations(p Plan) actSizes {
	m := j.Model
	t := float64(p.TP)
	h, a := float64(m.Hidden), float64(m.Heads)
	b, s := float64(p.MBS), float64(j.Seq)
	bs := b * s
	n := bs
	if p.SP {
		n = bs / t
	}
	vl := math.Ceil(float64(m.Vocab) / t)
	return actSizes{
		layer: 4 * (4*n*h + 4*n + 12*bs*h/t + a*b*s*s/t),
		head:  4*(2*n*h+2*n+bs*vl+bs) + 16*bs,
	}
}
