package plan

import "math"

// EngineStore is what the Trellis engine keeps on a rank beyond the
// published formulas, for the plans it runs (engineRuns): the planner's
// memory model (Job.Memory, Job.StageMemory) composes it — states sharded
// as modelStates says, micro-batches in flight as inFlight says — when the
// cluster file sets engine_stash and the job carries one. The engine
// (package train) fills it from its own accounting, so the planner, the
// engine's out-of-memory hint and its end-of-run report hold one model.
// A change to what the engine stores (precision, recomputation) changes
// engineActivations, engineWorkspace or Buffers here, and nothing else.
type EngineStore struct {
	// Threads is the kernel threads per rank: the materialising attention
	// backward keeps one (T,T) scratch per worker, min(threads, B·a/t).
	Threads int
	// Buffers, when set, is the engine's communication buffers of a rank
	// of pipeline stage `stage` under p, in bytes (parallel/zero's
	// accounting, which depends on its bucket layout); nil: the planner's.
	Buffers func(p Plan, stage int) float64
	// Buckets, when set, is how many collectives the engine's
	// data-parallel reduction (and ZeRO-1/2's gather) of a rank of
	// pipeline stage `stage` under p issues: its bucket layout
	// (parallel/flat: whole units grouped up to the job's bucket size);
	// nil: the planner's 40M-parameter buckets. On a CPU host each pays a
	// hand-off.
	Buckets func(p Plan, stage int) float64
	// FP8History is the steps of amax history the engine's fp8 keeps per
	// tensor (train.fp8_history under the delayed recipe; 0 under the
	// blockwise one, which keeps none). Without a store the planner
	// assumes delayed scaling's default, 16.
	FP8History int
	// PairLinks says the engine's ranks talk over emulated links that give
	// every pair of ranks its own link for point-to-point messages
	// (comm/local's link emulation: messages to different peers travel at
	// once), not one port per rank: expert parallelism's all-to-all-v's
	// then take one peer's message time, not ep−1 of them (engineA2A).
	PairLinks bool
}

// dpBuckets is how a data-parallel reduction of the P parameters of
// pipeline stage s is cut: n collectives of P/n parameters, the first (the
// one that cannot hide) of first parameters — the engine's layout
// (EngineStore.Buckets) or the planner's 40M-parameter buckets.
func (j Job) dpBuckets(p Plan, s int, P float64) (n, first float64) {
	if j.Engine != nil && j.Engine.Buckets != nil {
		if n := j.Engine.Buckets(p, s); n >= 1 {
			return n, P / n
		}
	}
	return buckets(P), math.Min(P, bucketParams)
}

// engineStageMemory is stageMemory for a rank running the Trellis engine:
// the stash of engineActivations per micro-batch in flight, the engine's
// backward scratch as workspace, the engine's buffers, no runtime reserve
// (the engine's device budget counts only what it allocates), and the
// engine's pipeline layout (the last stage of a tied model holds the whole
// embedding unit, positions included, for the tied head).
func (j Job) engineStageMemory(p Plan, sp shapeParams, stage, layers int) Memory {
	headStage := p.PP - 1
	var P float64
	if p.Schedule == DualPipeV && p.PP > 1 {
		// the V: rank k holds stages k and 2pp−1−k, rank 0 the embedding and
		// the head (a tied head's unit 0 once, as one device holds it)
		c0, c1 := j.engineVChunks(p, stage)
		layers, headStage = c0+c1, 0
		P = float64(layers) * sp.layer
		if stage == 0 {
			P += sp.embed + float64(j.Model.normParams())
			if !j.Model.Tied {
				P += sp.vocab
			}
		}
	} else {
		P = sp.params(stage, layers)
		if p.PP > 1 && stage == p.PP-1 && j.Model.Tied && j.Model.learnedPositions() {
			P += float64(j.Model.MaxSeq) * float64(j.Model.Hidden)
		}
	}
	mem := Memory{Stage: stage, Layers: layers, Budget: j.Cluster.Accel.Memory}
	P += j.engineMoEParams(p, stage, layers, sp.layer)
	modelStates(&mem, P, p)
	if j.engineBF16(p) {
		j.engineBF16States(&mem, P, p)
	}
	j.engineEPStates(&mem, P, p, stage)
	a := j.engineActivations(p)
	// Every stash keeps its blocks, its last residual and the micro-batch's
	// token ids (and recomputation's shared buffer); the last stage adds
	// the head's; the executor's in-flight counts are engineStageAct's.
	perMB := a.layer*float64(layers) + a.chunk
	if layers > 0 {
		perMB += a.perStash
	}
	head := 0.0
	if stage == headStage {
		head = a.head
	}
	mem.ActPerMicroBatch = ceil(perMB + head)
	act, inFlight := j.engineStageAct(p, a, sp.pt, stage, layers)
	mem.Act, mem.InFlight = ceil(act), inFlight
	mem.Workspace = ceil(float64(engineRunners(p)) * j.engineWorkspace(p))
	if j.Engine != nil && j.Engine.Buffers != nil {
		mem.Buffers = ceil(j.Engine.Buffers(p, stage))
	} else {
		mem.Buffers = ceil(j.buffers(p, sp, stage, layers))
	}
	mem.Other = mem.Workspace + mem.Buffers
	mem.Total = mem.Param + mem.Grad + mem.Optim + mem.Act + mem.Other
	return mem
}

// engineRunners is the model runners a rank keeps, each with its own
// workspace: two under ep_overlap=on (the paired forward's and the
// backward's: train's pair), else one.
func engineRunners(p Plan) int {
	if p.EPOverlap {
		return 2
	}
	return 1
}

// engineWorkspace is one runner's backward scratch, in bytes: arch's
// Workspace (the declarations the engine carves its scratch by, model's
// dims.go), for a micro-batch of b sequences of s tokens on part (tp, sp)
// with w = min(threads, b·kv/t) attention workers (kv the key/value heads:
// the heads, but for a Llama's grouped-query attention). For GPT-2, with
// T = b·s tokens, n = T (T/t with sequence parallelism), C = h, F = 4h/t,
// V' = ⌈V/t⌉, 4 bytes per float, and in bf16 or fp16 13C more (a unit's
// vectors widened),
//
//	dres n·C + dln T·C + big max(T·V', 2·T·F) + scratch w·s² (0 with flash)
//	+ branch n·C (with dropout or t > 1)
//	+ with t > 1: big ≥ max(T·C, (t+1)·V'), ce 3·T
//	+ with sequence parallelism: gath T·C, dlnl n·C, lnGrad 2C
//
// and, in bf16 or fp16, the 16-bit GEMM operands' scratch, 2 bytes per
// element: 2·T·max(C, F, V') for the output gradient, and with sequence
// parallelism 2·T·C more for the gathered norm output (otherwise the
// GEMMs read their activation operands from the 16-bit stash,
// engineHalfStash); in fp8 arch.FP8's quantised operands more. A Llama's differs in big (its SwiGLU's 3·T·F' and
// attention's 2·T·(q'+2kv') + 2·T·q'), the output gradient's width, its
// vectors (2C) and its RoPE table (s·HS).
func (j Job) engineWorkspace(p Plan) float64 {
	ac, d := j.engineArch(p)
	threads := 1
	if j.Engine != nil {
		threads = max(1, j.Engine.Threads)
	}
	workers := max(1, min(threads, p.MBS*j.Model.KVHeads/max(1, p.TP)))
	ws := ac.Workspace(d, j.engineHalfStash(p), float64(workers)).Bytes()
	if p.Precision == FP8 {
		ws += ac.FP8Workspace(d).Bytes() // the quantised operands (arch.FP8)
	}
	return ws
}

// StageMemory is the prediction for a rank of pipeline stage `stage`
// (0 ≤ stage < pp) under p, which must pass Check: Memory gives the most
// loaded stage, this one any stage, so that a run can hold each rank's
// measured peaks against its own prediction.
func (j Job) StageMemory(p Plan, stage int) Memory {
	sp := j.shapeParams(p)
	stage = max(0, min(stage, p.PP-1))
	return j.stageMemory(p, sp, j.activations(p), stage, sp.pt.count(stage))
}
