package plan

import "math"

// engineRuns says whether the Trellis engine runs p for the job's model the
// way its stash formula describes: a GPT block (FFN = 4h, one key/value head
// per head, not gated), fp32, bf16 or fp16 (whose stash the engine keeps
// in fp32 too: only its GEMM operands are rounded, into workspace), no
// recomputation, no flash attention, cp = 1.
func (j Job) engineRuns(p Plan) bool {
	m := j.Model
	return !m.gated() && m.KVHeads == m.Heads && m.FFN == 4*m.Hidden &&
		(p.Precision == FP32 || p.Precision == BF16 || p.Precision == FP16) && p.Recompute == RecomputeNone && !p.Flash && p.CP == 1
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

// engineBF16 says whether p's model states are the Trellis engine's bf16
// ones (engineBF16States): a CPU host cluster (engine_stash) running the
// engine's model in bf16 or fp16 on whole layers (the engine refuses them
// with tp or pp). The engine keeps fp32 gradients under fp16 too.
func (j Job) engineBF16(p Plan) bool {
	return j.Cluster.EngineStash && j.engineRuns(p) && (p.Precision == BF16 || p.Precision == FP16) && p.TP == 1 && p.PP == 1
}

// engineBF16States replaces modelStates' bf16 bytes with the engine's
// (docs/ARCHITECTURE.md, "Mixed precision"), for P parameters sharded over
// N = dp ranks: its fp32 weights are the master weights, whole under ZeRO
// 1-2 as in fp32 runs, and its bf16 copy is whole except under ZeRO-3,
// where only the unit being computed has one (u = the largest unit: a
// block, 12h² + 13h, or the embedding, (V + s)·h):
//
//	Param = 2P, or 2u with zero=3     Grad = 4P / (N if zero≥2)
//	Optim = 4P / (N if zero=3) + 8P / (N if zero≥1)
func (j Job) engineBF16States(mem *Memory, P float64, p Plan) {
	n := float64(p.DP * p.CP)
	shard := func(stage int) float64 {
		if p.ZeRO >= stage {
			return n
		}
		return 1
	}
	h := float64(j.Model.Hidden)
	u := math.Max(12*h*h+13*h, float64(j.Model.Vocab+j.Model.MaxSeq)*h)
	mem.Param = ceil(2 * P)
	if p.ZeRO == 3 {
		mem.Param = ceil(2 * u)
	}
	mem.Grad = ceil(4 * P / shard(2))
	mem.Optim = ceil(4*P/shard(3) + 8*P/shard(1))
}
