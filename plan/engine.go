package plan

import "math"

// engineRuns says whether the Trellis engine runs p for the job's model
// (EngineRefusals, the engine's own table), so that the engine's stash
// formula describes it.
func (j Job) engineRuns(p Plan) bool { return len(EngineRefusals(j.Model, p)) == 0 }

// engineActivations is the Trellis engine's own stash (docs/ARCHITECTURE.md,
// "Tensor and sequence parallelism" and "Pipeline parallelism"), in bytes
// for one micro-batch of b = mbs sequences of s tokens on one of t tensor
// ranks, h the width, a the heads, n = bs (bs/t with sequence
// parallelism), V' = ⌈V/t⌉:
//
//	layer    4·(4nh + 4n + 12bsh/t + A)
//	chunk    4nh + 8bs      (per stage stash: its output residual, its input and target ids)
//	head     4·(nh + 2n + bs·V' + bs)   (ln_f and its statistics, probabilities, losses)
//	working  8bs            (the rank's input and target ids, once)
//
// with A = a·b·s²/t the attention probabilities (a·b·s/t log-sum-exps with
// flash). A pipeline stage of k layers in v chunks keeps k·layer + v·chunk
// per micro-batch in flight; with pp = 1 this is L·layer + 4·(2nh + 2n +
// bs·V' + bs) + 16bs. Recomputation moves bytes from every layer to one
// shared copy per stash (perStash):
//
//	selective  layer − 4A per layer, 4A per stash   (nothing moves with flash)
//	full       4nh per layer (its input), 4·(3nh + 4n + 12bsh/t + A) per stash
//
// Dropout masks are recomputed, so the embedding keeps nothing of its own
// (its output is the first layer's residual).
//
// Under bf16 or fp16 (engineHalfStash) the stash keeps ln1, qkv, atty,
// ln2, fc, fcg and ln_f in 2 bytes (model/stash16.go; a tensor-parallel
// rank its slices and, with sp, its tokens, model/tp16.go) and the rest — the residual stream, LayerNorm statistics, attention
// probabilities or log-sum-exps, output probabilities and losses — in 4:
//
//	layer    4·(2nh + 4n + A) + 2·(2nh + 12bsh)
//	head     4·(2n + bs·V + bs) + 2·nh
//
// (chunk and working unchanged), and recomputation moves the same parts:
// full keeps 4nh per layer, selective shares 4A.
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
		layer:   4 * (4*n*h + 4*n + 12*bs*h/t + A),
		chunk:   4*n*h + 8*bs,
		head:    4 * (n*h + 2*n + bs*vl + bs),
		working: 8 * bs,
	}
	if j.engineHalfStash(p) {
		acts.layer = 4*(2*n*h+4*n+A) + 2*(2*n*h+12*bs*h/t)
		acts.head = 4*(2*n+bs*vl+bs) + 2*n*h
	}
	switch {
	case p.Recompute == RecomputeFull:
		acts.layer, acts.perStash = 4*n*h, acts.layer-4*n*h
	case p.Recompute == RecomputeSelective && !p.Flash:
		acts.layer, acts.perStash = acts.layer-4*A, 4*A
	}
	return acts
}

// engineStageAct is the act peak the engine measures on pipeline stage k
// holding `layers` layers (parallel/pp's executor; docs/ARCHITECTURE.md,
// "Pipeline parallelism"): every block stash of the rank is sized for its
// largest chunk (q' layers), the head's activations are a stash of their
// own between the last chunk's F and B, and zb-h1 keeps a stash until W
// and the four linears' output gradients (9·bsh fp32 per layer) from B to
// W:
//
//	act = c·(q'·layer + chunk) + heads·head + working + w·36·bsh·layers
//
// with c the micro-batches in flight over the rank's chunks — GPipe m,
// 1F1B min(m, pp−k), interleaved min(2(pp−k−1) + (v−1)·pp + 1, v·m) (v·m
// when m = pp), zb-h1 min(pp, m) — heads m (GPipe) or 1 on the last stage,
// and w = min(k+1, m) for zb-h1 (else 0). It returns act and c in stage
// units (c/v).
func (j Job) engineStageAct(p Plan, a actSizes, pt partition, k, layers int) (act, inFlight float64) {
	m, pp, v := j.MicroBatches(p), p.PP, max(1, p.VPP)
	var c, w int
	switch p.Schedule {
	case GPipe:
		c = m
	case Interleaved:
		c = min(2*(pp-k-1)+(v-1)*pp+1, v*m)
		if m == pp {
			c = v * m
		}
	case ZBH1:
		c, w = min(pp, m), min(k+1, m)
	default:
		c = min(m, pp-k)
	}
	if pp == 1 {
		c, w = 1, 0
	}
	q, short := splitCounts(j.Model.Layers, pp*v)
	largest := q
	if short > 0 && pt.short(k) < v {
		largest = q + 1
	}
	heads := 0
	if k == pp-1 {
		heads = 1
		if p.Schedule == GPipe && pp > 1 {
			heads = m
		}
	}
	bsh := float64(p.MBS) * float64(j.Seq) * float64(j.Model.Hidden)
	perStash := 0.0
	if largest > 0 {
		perStash = a.perStash // recomputation's shared buffer, one per stash
	}
	act = float64(c)*(float64(largest)*a.layer+a.chunk+perStash) + float64(heads)*a.head + a.working + float64(w)*36*bsh*float64(layers)
	return act, float64(c) / float64(v)
}

// engineHalfStash says whether the engine keeps p's stash in 16-bit
// (model/stash16.go): bf16 or fp16, on whole layers and on a
// tensor-parallel rank's slices alike (model/tp16.go).
func (j Job) engineHalfStash(p Plan) bool {
	return p.Precision == BF16 || p.Precision == FP16
}

// engineBF16 says whether p's model states are the Trellis engine's bf16
// ones (engineBF16States): a CPU host cluster (engine_stash) running the
// engine's model in bf16 or fp16, with any tp and pp. The engine keeps
// fp32 gradients under fp16 too.
func (j Job) engineBF16(p Plan) bool {
	return j.Cluster.EngineStash && j.engineRuns(p) && (p.Precision == BF16 || p.Precision == FP16)
}

// engineBF16States replaces modelStates' bf16 bytes with the engine's
// (docs/ARCHITECTURE.md, "Mixed precision"), for the P parameters of a
// rank (its tensor-parallel part of its pipeline stage's units) sharded
// over N = dp ranks. Without tp and pp (engineZeROHalf) ZeRO-1/2 shard the
// fp32 master weights with the moments (Megatron's distributed optimizer;
// the weights are held and gathered in 16-bit, parallel/zero/half.go) and
// the runner's copy of the unit in use comes on top of the whole 16-bit
// weights; with tp or pp ZeRO-1/2 keep the fp32 weights whole, as in fp32
// runs. ZeRO-3's fp32 weights are the master chunks and only the unit
// being computed has a 16-bit copy (u = engineUnit, the largest unit of a
// tensor-parallel rank):
//
//	Param = 2P (zero=0, or zero 1-2 with tp or pp), 2P + 2u (zero 1-2), 2u (zero=3)
//	Grad  = 4P / (N if zero≥2)
//	Optim = 12P / (N if zero≥1), or 4P + 8P/N (zero 1-2 with tp or pp)
//
//	Param = 2P (zero=0), 2P + 2u (zero 1-2), 2u (zero=3)
//	Grad  = 4P / (N if zero≥2)          Optim = 12P / (N if zero≥1)
func (j Job) engineBF16States(mem *Memory, P float64, p Plan) {
	n := float64(p.DP * p.CP)
	shard := func(stage int) float64 {
		if p.ZeRO >= stage {
			return n
		}
		return 1
	}
	u := j.engineUnit(p)
	switch {
	case p.ZeRO == 0 || (p.ZeRO < 3 && !j.engineZeROHalf(p)):
		mem.Param = ceil(2 * P)
	case p.ZeRO == 3:
		mem.Param = ceil(2 * u)
	default:
		mem.Param = ceil(2*P + 2*u)
	}
	mem.Grad = ceil(4 * P / shard(2))
	mem.Optim = ceil(12 * P / shard(1))
	if p.ZeRO < 3 && !j.engineZeROHalf(p) {
		mem.Optim = ceil(4*P + 8*P/shard(1))
	}
}

// engineZeROHalf says whether p's ZeRO-1/2 keeps its weights in 16-bit and
// shards the fp32 master weights (train.zeroHalf): zero 1-2 without tp and
// pp (a pipeline's or tensor-parallel rank's state keeps fp32 weights).
func (j Job) engineZeROHalf(p Plan) bool {
	return (p.ZeRO == 1 || p.ZeRO == 2) && p.TP == 1 && p.PP == 1
}

// engineUnit is the engine's largest unit on a rank of p, in parameters: a
// block, 12h²/t + 7h/t + 6h, or the embedding, (V' + s)·h with V' = ⌈V/t⌉
// (t = 1: 12h² + 13h and (V + s)·h).
func (j Job) engineUnit(p Plan) float64 {
	h, t := float64(j.Model.Hidden), float64(p.TP)
	vl := math.Ceil(float64(j.Model.Vocab) / t)
	return math.Max(12*h*h/t+7*h/t+6*h, (vl+float64(j.Model.MaxSeq))*h)
}
