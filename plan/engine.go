package plan

import (
	"math"

	"trellis/arch"
)

// engineRuns says whether the Trellis engine runs p for the job's model
// (EngineRefusals, the engine's own table), so that the engine's stash
// formula describes it.
func (j Job) engineRuns(p Plan) bool { return len(EngineRefusals(j.Model, p)) == 0 }

// engineActivations is the Trellis engine's own stash, in bytes for one
// micro-batch of b = mbs sequences of s tokens on one of t tensor ranks
// (n = bs, bs/t with sequence parallelism), derived from the declarations
// the engine carves its stash by (package arch: Config.BlockSaved,
// HeadSaved and BlocksElems), so the planner and the engine count the
// same tensors in the same dtypes:
//
//	layer    a block's saved activations + its input residual (4·nh)
//	chunk    4nh + 8bs      (per stage stash: its output residual, its input and target ids)
//	head     the head's     (ln_f and its statistics, probabilities, losses)
//	working  8bs            (the rank's input and target ids, once)
//
// in fp32, or under bf16 and fp16 with the Operand tensors (the norm
// outputs, qkv, the attention output, fc and GELU(fc), ln_f) at 2 bytes.
// Recomputation moves bytes from every layer to one shared copy per stash
// (perStash): selective shares the attention probabilities (nothing moves
// with flash, which keeps log-sum-exps), full keeps each layer's input
// residual and one block's activations. Dropout masks are recomputed, so
// the embedding keeps nothing of its own (its output is the first layer's
// residual). For t = 1 in fp32 without recomputation a layer is
// 4·(16·bsh + 4·bs + a·b·s²).
func (j Job) engineActivations(p Plan) actSizes {
	m := j.Model
	ac, d := j.engineArch(p)
	half := j.engineHalfStash(p)
	bs := float64(p.MBS) * float64(d.T) // the rank's tokens: seq/cp under cp
	resid := 4 * float64(d.Tokens()) * float64(m.Hidden)
	block := ac.BlocksElems(d, 1, half).Bytes()
	if l := engineWidestBlock(ac); l >= 0 { // an MoE model: its MoE block's (moe_engine.go)
		block = ac.BlocksElemsAt(d, l, l+1, half).Bytes()
	}
	acts := actSizes{
		layer:   block + resid,
		chunk:   resid + 8*bs,
		head:    arch.Sum(ac.HeadSaved(d), half).Bytes(),
		working: 8 * bs,
	}
	switch {
	case p.Recompute == RecomputeFull:
		acts.layer, acts.perStash = resid, block
	case p.Recompute == RecomputeSelective && !p.Flash:
		var probs float64
		for _, sv := range ac.BlockSaved(d) {
			if sv.Role == arch.Probs {
				probs += arch.Sum([]arch.Saved{sv}, half).Bytes()
			}
		}
		acts.layer, acts.perStash = acts.layer-probs, probs
	}
	return acts
}

// engineArch is the job's model and a micro-batch of p as the engine's
// declarations describe them (arch.Config, arch.Dims): GPT-2, or for the
// Llama family the engine's Llama (its key/value heads, SwiGLU width and
// head; dropout, which only sizes the scratch, at any positive rate).
// Under cp the pass is the rank's share, seq/cp tokens of every sequence,
// with the ring attention's log-sum-exps and scratch (arch.Dims.CP).
func (j Job) engineArch(p Plan) (arch.Config, arch.Dims) {
	m := j.Model
	c := arch.Config{Layers: m.Layers, Hidden: m.Hidden, Heads: m.Heads, SeqLen: j.Seq, Vocab: m.Vocab}
	if m.Family == Llama {
		c.Arch, c.KVHeads, c.FFN, c.TieEmbeddings = arch.Llama, m.KVHeads, m.FFN, m.Tied
		engineMoE(&c, m)
	}
	if m.Dropout {
		c.Dropout = 0.1
	}
	// The ring attention keeps log-sum-exps whatever flash says.
	part := arch.Part{TP: p.TP, SP: p.SP}
	if ep, _ := p.Experts(); ep > 1 && m.moe() {
		part.EP = ep // rank 0 of the ep group: every rank holds as many experts
	}
	return c, arch.Dims{B: p.MBS, T: j.Seq / max(1, p.CP), Part: part, Flash: p.Flash || p.CP > 1, CP: p.CP}
}

// engineStageAct is the act peak the engine measures on pipeline stage k
// holding `layers` layers (parallel/pp's executor; docs/ARCHITECTURE.md,
// "Pipeline parallelism"): every block stash of the rank is sized for its
// largest chunk (q' layers), the head's activations are a stash of their
// own between the last chunk's F and B, and zb-h1 keeps a stash until W
// and the four linears' output gradients from B to W (arch's
// DeferredSaved, fp32 per layer: the row-parallel ones' b·s·h each, the
// column-parallel ones' 4bsh/t and 3bsh/t, 9·bsh at t = 1):
//
//	act = c·(q'·layer + chunk) + heads·head + working + w·4·bsh·(2 + 7/t)·layers
//
// with c the micro-batches in flight over the rank's chunks — GPipe m,
// 1F1B min(m, pp−k), interleaved min(2(pp−k−1) + (v−1)·pp + 1, v·m) (v·m
// when m = pp), zb-h1 min(pp, m) — heads m (GPipe, and interleaved with m = pp) or 1 on the last stage,
// and w = min(k+1, m) for zb-h1 (else 0); pp = 1 keeps one micro-batch
// in flight, two (and two heads) under ep_overlap=on, whose paired F(i+1)
// holds its stash beside B(i)'s. It returns act and c in stage
// units (c/v). heads is m also for interleaved with m = pp, which runs
// every forward first.
func (j Job) engineStageAct(p Plan, a actSizes, pt partition, k, layers int) (act, inFlight float64) {
	if p.Schedule == DualPipeV && p.PP > 1 {
		return j.engineVAct(p, a, k)
	}
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
		if p.EPOverlap { // F(i+1) runs beside B(i): two stashes, two heads
			c = min(2, m)
		}
	}
	q, short := splitCounts(j.Model.Layers, pp*v)
	largest := q
	if short > 0 && pt.short(k) < v {
		largest = q + 1
	}
	heads := 0
	if k == pp-1 {
		heads = 1
		if pp == 1 {
			heads = c
		}
		// GPipe runs every forward first, and so does interleaved when
		// m = pp (parallel/pp's build): the last stage holds every
		// micro-batch's head until its backward.
		if pp > 1 && (p.Schedule == GPipe || (p.Schedule == Interleaved && m == pp)) {
			heads = m
		}
	}

	perStash := 0.0
	if largest > 0 {
		perStash = a.perStash // recomputation's shared buffer, one per stash
	}
	ac, d := j.engineArch(p)
	deferred := arch.Sum(ac.DeferredSaved(d), false).Bytes() // per layer: dY of c_proj, mlp.c_proj (b·s·h each), c_fc (4bsh/t), c_attn (3bsh/t)
	blocks := float64(largest)*a.layer + perStash
	if b, ok := j.engineMoEChunk(p, k); ok { // an MoE model's blocks differ: its widest chunk's (moe_engine.go)
		blocks = b
	}
	act = float64(c)*(blocks+a.chunk) + float64(heads)*a.head + a.working + float64(w)*deferred*float64(layers)
	return act, float64(c) / float64(v)
}

// engineHalfStash says whether the engine keeps p's stash in 16-bit
// (model/stash16.go): bf16, fp16 or fp8 (whose stash is bf16's), on whole
// layers and on a tensor-parallel rank's slices alike (model/tp16.go).
func (j Job) engineHalfStash(p Plan) bool {
	return p.Precision == BF16 || p.Precision == FP16 || p.Precision == FP8
}

// engineBF16 says whether p's model states are the Trellis engine's bf16
// ones (engineBF16States): a CPU host cluster (engine_stash) running the
// engine's model in bf16 or fp16, with any tp and pp. The engine keeps
// fp32 gradients under fp16 too.
func (j Job) engineBF16(p Plan) bool {
	return j.Cluster.EngineStash && j.engineRuns(p) && j.engineHalfStash(p)
}

// engineBF16States replaces modelStates' bf16 bytes with the engine's
// (parallel/zero's accounting under a mixed policy), for the P parameters
// of a rank (its tensor-parallel part of its pipeline stage's units)
// sharded over N = dp ranks. Every stage keeps fp32 master weights for
// the optimizer and hands the layers 16-bit weights: stage 0 a 16-bit
// copy of its masters; stages 1 and 2 shard the masters with the moments
// (Megatron's distributed optimizer) and hold every weight in 16-bit,
// gathered in 16-bit after the update; stage 3's fp32 chunks are the
// masters, gathered in fp32 and rounded per unit while it is fetched
// (u = engineUnit, the largest unit of a tensor-parallel rank):
//
//	Param = 2P (zero 0-2), 2u (zero=3)
//	Grad  = 4P / (N if zero≥2)          Optim = 12P / (N if zero≥1)
func (j Job) engineBF16States(mem *Memory, P float64, p Plan) {
	n := float64(p.DP * p.CP)
	shard := func(stage int) float64 {
		if p.ZeRO >= stage {
			return n
		}
		return 1
	}
	mem.Param = ceil(2 * P)
	if p.ZeRO == 3 {
		mem.Param = ceil(2 * j.engineUnit(p))
	}
	mem.Grad = ceil(4 * P / shard(2))
	mem.Optim = ceil(12 * P / shard(1))
	if p.Precision == FP8 {
		mem.Param += ceil(j.engineFP8History())
	}
}

// engineFP8History is the fp8 runner's amax histories (model/fp8.go),
// charged to param: every block's four linear layers' three operands,
// EngineStore.FP8History steps each (without a store delayed scaling's
// default, 16 steps: precision.DefaultFP8).
func (j Job) engineFP8History() float64 {
	h := 16
	if j.Engine != nil {
		if h = j.Engine.FP8History; h == 0 {
			return 0
		}
	}
	return arch.FP8HistoryBytes(j.Model.Layers, h)
}

// engineUnit is the engine's largest unit on a rank of p, in parameters: a
// block, 12h²/t + 7h/t + 6h, or the embedding, (V' + s)·h with V' = ⌈V/t⌉
// (t = 1: 12h² + 13h and (V + s)·h); a Llama's from arch's declarations
// (arch.Config.LargestUnit: a block, the embedding or the untied head).
func (j Job) engineUnit(p Plan) float64 {
	if j.Model.Family == Llama {
		ac, d := j.engineArch(p)
		return ac.LargestUnit(d.Part)
	}
	h, t := float64(j.Model.Hidden), float64(p.TP)
	vl := math.Ceil(float64(j.Model.Vocab) / t)
	return math.Max(12*h*h/t+7*h/t+6*h, (vl+float64(j.Model.MaxSeq))*h)
}

// engineVChunks are the layers of DualPipeV rank k's two chunks: model
// stages k and 2pp−1−k of the split over 2pp chunks (chunkLayers).
func (j Job) engineVChunks(p Plan, k int) (c0, c1 int) {
	counts := chunkLayers(j.Model.Layers, 2*p.PP)
	return counts[k], counts[2*p.PP-1-k]
}

// engineVDeferred is DualPipeV rank r's peak of weight stashes per chunk
// (parallel/pp's dualpipev.go, its simulated Deferred): the engine's
// backward is always split, so a chunk whose W follows its B at once
// still holds one. Phase 6 defers ⌊(r+1)/2⌋ chunk-1 and ⌊r/2⌋+1 chunk-0
// W's (queued B1, B0 alternately, an even rank's first a B0); phase 7's
// k = pp−r−1 steps each run the oldest and defer a chunk-0 one, so chunk 0
// peaks at r+1 less the chunk-1 W's still queued after them:
//
//	d1 = max(1, ⌊(r+1)/2⌋)
//	d0 = r + 1 − (⌊(r+1)/2⌋ − min(⌈k/2⌉ (r odd) or ⌊k/2⌋ (r even), ⌊(r+1)/2⌋))
func engineVDeferred(pp, r int) (d0, d1 int) {
	c1, k := (r+1)/2, pp-r-1
	popped := k / 2
	if r%2 == 1 {
		popped = (k + 1) / 2
	}
	return r + 1 - (c1 - min(popped, c1)), max(1, c1)
}

// engineVAct is engineStageAct under DualPipeV: rank k holds chunks of c0
// and c1 layers (engineVChunks), every block stash sized for the larger,
// 2pp+1 of them at its peak (2pp−k of chunk 0, k+1 of chunk 1: the
// planner's in-flight counts of the general model, genmemory.go), the
// head's stash on rank 0 (the V's last stage), and the weight stashes of
// engineVDeferred:
//
//	act = (2pp+1)·(max(c0,c1)·layer + chunk) + head·[k = 0] + working + deferred·(d0·c0 + d1·c1)
//
// inFlight is (2pp+1)/2 in stage units.
func (j Job) engineVAct(p Plan, a actSizes, k int) (act, inFlight float64) {
	c0, c1 := j.engineVChunks(p, k)
	c := 2*p.PP + 1
	largest := max(c0, c1)
	perStash := 0.0
	if largest > 0 {
		perStash = a.perStash
	}
	heads := 0
	if k == 0 {
		heads = 1
	}
	ac, d := j.engineArch(p)
	deferred := arch.Sum(ac.DeferredSaved(d), false).Bytes()
	d0, d1 := engineVDeferred(p.PP, k)
	blocks := float64(largest)*a.layer + perStash
	if b, ok := j.engineMoEChunk(p, k); ok { // an MoE model's blocks differ: its widest chunk's (moe_engine.go)
		blocks = b
	}
	act = float64(c)*(blocks+a.chunk) + float64(heads)*a.head + a.working + deferred*float64(d0*c0+d1*c1)
	return act, float64(c) / 2
}
