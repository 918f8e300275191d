package plan

import "math"

// engineRuns says whether the Trellis engine runs p for the job's model the
// way its stash formula describes: a GPT block (FFN = 4h, one key/value head
// per head, not gated), fp32, cp = 1 (any recomputation, flash or not).
func (j Job) engineRuns(p Plan) bool {
	m := j.Model
	return !m.gated() && m.KVHeads == m.Heads && m.FFN == 4*m.Hidden &&
		p.Precision == FP32 && p.CP == 1
}

// engineActivations is the Trellis engine's own stash (docs/ARCHITECTURE.md,
// "Tensor and sequence parallelism"), in bytes for one micro-batch of
// b = mbs sequences of s tokens on one of t tensor ranks, h the width, a
// the heads, n = bs (bs/t with sequence parallelism), V' = ⌈V/t⌉:
//
//	layer  4·(4nh + 4n + 12bsh/t + A)
//	stage  4·nh + 16bs                          (the stage's last residual; input and target ids)
//	head   4·(nh + 2n + bs·V' + bs)             (ln_f and its stats, probabilities, losses)
//
// with A = a·b·s²/t the attention probabilities (a·b·s/t log-sum-exps with
// flash). Every pipeline stage keeps "stage" once per micro-batch (in
// actSizes.embed, which engineStageMemory charges on every stage); the last
// adds "head". Recomputation moves bytes from every layer to one shared copy
// per stash (perStash):
//
//	selective  layer − 4A per layer, 4A per stash   (nothing moves with flash)
//	full       4nh per layer (its input), 4·(3nh + 4n + 12bsh/t + A) per stash
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
	A := a * b * s * s / t
	if p.Flash {
		A = a * b * s / t
	}
	acts := actSizes{
		layer: 4 * (4*n*h + 4*n + 12*bs*h/t + A),
		embed: 4*n*h + 16*bs,
		head:  4 * (n*h + 2*n + bs*vl + bs),
	}
	switch {
	case p.Recompute == RecomputeFull:
		acts.layer, acts.perStash = 4*n*h, acts.layer-4*n*h
	case p.Recompute == RecomputeSelective && !p.Flash:
		acts.layer, acts.perStash = acts.layer-4*A, 4*A
	}
	return acts
}
