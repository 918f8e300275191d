package plan

import "math"

// Memory is the predicted peak memory of the most loaded device, in bytes,
// per category of the seed's formula plus Other (runtime reserve, transient
// workspaces and communication buffers).
type Memory struct {
	Param, Grad, Optim, Act, Other int64
	Total, Budget                  int64

	Stage            int     // the pipeline stage these figures are for
	Layers           int     // transformer layers on that stage
	InFlight         float64 // micro-batches whose activations the stage holds, in whole-stage units
	ActPerMicroBatch int64   // activations one micro-batch leaves on the stage
	Reserved         int64   // part of Other: runtime (context, library workspaces)
	Workspace        int64   // part of Other: largest transient tensor
	Buffers          int64   // part of Other: communication and ZeRO-3 gather buffers
}

// Fits reports Total ≤ Budget.
func (m Memory) Fits() bool { return m.Total <= m.Budget }

// ByTag splits the prediction by the tags package device charges
// allocations to (param, grad, optim, act, workspace, comm), so a run's
// measured peaks can be held against it. The runtime reserve is not
// allocated by Trellis and is left out.
func (m Memory) ByTag() map[string]int64 {
	return map[string]int64{"param": m.Param, "grad": m.Grad, "optim": m.Optim, "act": m.Act,
		"workspace": m.Workspace, "comm": m.Buffers}
}

// ModelStates is Param + Grad + Optim.
func (m Memory) ModelStates() int64 { return m.Param + m.Grad + m.Optim }

// Bytes per element or per parameter under a precision.
//
//	precision  weights  grads  optimizer (per parameter)       activations
//	fp32       4        4      8  (Adam m, v)                   4
//	fp16       2        2      12 (fp32 master, m, v)           2
//	bf16       2        4      12 (fp32 master, m, v)           2
//	fp8        2        4      12 (fp32 master, m, v)           2
//
// fp16 is the mixed precision of Rajbhandari et al. 2020 (ZeRO's 2 + 2 + K
// with K = 12). bf16 accumulates and reduces its gradients in fp32:
// Megatron's default ("bfloat16 requires gradient accumulation and
// all-reduce to be done in fp32"), whose distributed-optimizer table gives
// 18 bytes per parameter, or 6 + 12/d sharded (docs/user-guide/features/
// dist_optimizer.md); DeepSpeed's bf16 optimizer keeps fp32 gradients too.
// fp8 keeps bf16 weights, fp32 gradients and bf16 activations outside its
// GEMMs (as Transformer Engine does); counting its saved GEMM inputs at 2
// bytes is conservative.
func weightBytes(p Precision) float64 {
	if p == FP32 {
		return 4
	}
	return 2
}

// gradBytes is the gradient buffer's bytes per parameter, which is also
// what data-parallel reduction moves.
func gradBytes(p Precision) float64 {
	if p == FP16 {
		return 2
	}
	return 4
}

func optimBytes(p Precision) float64 {
	if p == FP32 {
		return 8
	}
	return 12
}

func actBytes(p Precision) float64 { return weightBytes(p) }

// stageParams is the number of parameters one device of pipeline stage
// `stage` holds: its layers (partition) split tp ways (matrices and the
// biases of column-parallel layers split; norms and row-parallel biases
// replicated), plus the vocab-parallel embedding, learned positions and
// embedding norm on the first stage, plus the final norm and the output
// layer on the last (a tied output layer is a second copy when the two
// stages differ, as in Megatron). p must pass Check.
func (j Job) stageParams(p Plan, stage int) float64 {
	sp := j.shapeParams(p)
	return sp.params(stage, sp.pt.count(stage))
}

// shapeParams are the parameter counts that depend on tp, pp and vpp only,
// computed once per shape.
type shapeParams struct {
	layer float64 // one layer on one tensor rank
	vocab float64 // V·h/t: a vocab-parallel embedding or output layer shard
	embed float64 // stage 0's extra: vocab + learned positions + embedding norm
	head  float64 // stage pp-1's extra: final norm (+ output layer unless tied with pp = 1)
	pt    partition
	// lay is the general path's layout (useGeneral), nil on the dense path.
	lay *layout
}

// params is the parameter count of stage k holding n layers.
func (sp shapeParams) params(k, n int) float64 {
	P := float64(n) * sp.layer
	if k == 0 {
		P += sp.embed
	}
	if k == sp.pt.pp-1 {
		P += sp.head
	}
	return P
}

// stage is the parameter count of stage 0, pp−1 or the busiest middle stage.
func (sp shapeParams) stage(k int) float64 { return sp.params(k, sp.pt.on(k)) }

// maxStage is the most parameters on any stage.
func (sp shapeParams) maxStage() float64 {
	P := math.Max(sp.stage(0), sp.stage(sp.pt.pp-1))
	if sp.pt.pp > 2 {
		P = math.Max(P, sp.stage(sp.pt.midRank))
	}
	return P
}

func (j Job) shapeParams(p Plan) shapeParams {
	pt, _ := newPartition(j.Model.Layers, p.PP, p.VPP)
	return j.tpParams(p.TP, pt)
}

// tpParams are the counts for tp ranks and partition pt. A rank's share
// of the vocabulary is ⌈V/t⌉ rows (the engine's vocab-parallel padding;
// Megatron-Core pads V further, to a multiple of 128·t).
func (j Job) tpParams(tp int, pt partition) shapeParams {
	m := j.Model
	t := float64(tp)
	sp := shapeParams{layer: m.layerParamsTP(t), vocab: math.Ceil(float64(m.Vocab)/t) * float64(m.Hidden), pt: pt}
	sp.embed = float64(m.EmbeddingParams()-int64(m.Vocab)*int64(m.Hidden)) + sp.vocab
	sp.head = float64(m.normParams())
	if !m.Tied || pt.pp > 1 {
		sp.head += sp.vocab
	}
	return sp
}

// layerParamsTP counts one layer's parameters on one of t tensor ranks.
func (m Model) layerParamsTP(t float64) float64 {
	h, f := float64(m.Hidden), float64(m.FFN)
	split := float64(m.LayerMatrixParams())
	repl := 2 * float64(m.normParams())
	if m.AttnBias {
		split += float64(m.Heads+2*m.KVHeads) * float64(m.HD())
		repl += h
	}
	if m.MLPBias {
		split += f
		if m.gated() {
			split += f
		}
		repl += h
	}
	return split/t + repl
}

// modelStates fills Param, Grad and Optim for P parameters on the stage,
// sharded over the N = dp·cp ranks that hold the same parameters:
//
//	Param = P·w / (N if zero=3)      Grad = P·g / (N if zero≥2)
//	Optim = P·k / (N if zero≥1)
//
// with w, g, k the weight, gradient and optimizer bytes above.
func modelStates(mem *Memory, P float64, p Plan) {
	n := float64(p.DP * p.CP)
	w, g, k := weightBytes(p.Precision), gradBytes(p.Precision), optimBytes(p.Precision)
	shard := func(stage int) float64 {
		if p.ZeRO >= stage {
			return n
		}
		return 1
	}
	mem.Param = ceil(P * w / shard(3))
	mem.Grad = ceil(P * g / shard(2))
	mem.Optim = ceil(P * k / shard(1))
}

// ceil rounds a byte count up, saturating at MaxBytes: a formula's float
// beyond int64 (a job no device holds) must not convert to a negative
// count. Memory.Total sums at most seven terms, each at most MaxBytes.
func ceil(x float64) int64 {
	if !(x < MaxBytes) { // NaN too
		return MaxBytes
	}
	return int64(math.Ceil(x))
}

// MaxBytes is where byte counts saturate (1 EiB), far above any device.
const MaxBytes = 1 << 60

// inFlight is how many micro-batches' activations pipeline stage `stage`
// holds at its peak, in units of one micro-batch through the whole stage:
//
//	no pipeline        1 (each micro-batch's backward frees it before the next)
//	GPipe              m (all forwards run before any backward)
//	1F1B               min(m, pp - stage)
//	interleaved        min(m·v, 2(pp-stage-1) + (v-1)·pp + 1) chunks of L/(pp·v)
//	                   layers, i.e. that count / v stages; on stage 0 this is
//	                   pp·(1 + (pp-1)/(pp·v)) (Narayanan et al. 2021).
func (j Job) inFlight(p Plan, stage int) float64 {
	m := float64(j.MicroBatches(p))
	switch {
	case p.PP == 1:
		return 1
	case p.Schedule == GPipe:
		return m
	case p.Schedule == Interleaved:
		v := float64(p.VPP)
		warm := 2*float64(p.PP-stage-1) + (v-1)*float64(p.PP) + 1
		return math.Min(m*v, warm) / v
	}
	return math.Min(m, float64(p.PP-stage))
}

// Memory predicts the peak memory of the most loaded device under p: the
// largest of the pipeline stages that can be the most loaded (stage 0, which
// holds the most micro-batches in flight; stage pp−1, which holds the output
// layer and the logits; and, under an uneven split, the first stage that
// holds more layers than those before it). p must pass Check.
func (j Job) Memory(p Plan) Memory {
	if j.useGeneral(p) {
		return j.generalMemory(p, j.newLayout(p))
	}
	return j.memory(p, j.shapeParams(p))
}

func (j Job) memory(p Plan, sp shapeParams) Memory {
	if sp.lay != nil {
		return j.generalMemory(p, sp.lay)
	}
	a := j.activations(p)
	pt := sp.pt
	worst := j.stageMemory(p, sp, a, pt.pp-1, pt.last)
	for _, r := range pt.memRanks {
		if m := j.stageMemory(p, sp, a, r.rank, r.layers); m.Total > worst.Total {
			worst = m
		}
	}
	return worst
}

func (j Job) stageMemory(p Plan, sp shapeParams, a actSizes, stage, layers int) Memory {
	if j.Cluster.EngineStash && j.engineRuns(p) {
		return j.engineStageMemory(p, sp, stage, layers)
	}
	mem := Memory{Stage: stage, Layers: layers, Budget: j.Cluster.Accel.Memory}
	modelStates(&mem, sp.params(stage, layers), p)
	if j.engineBF16(p) {
		j.engineBF16States(&mem, sp.params(stage, layers), p)
	}
	mem.InFlight = j.inFlight(p, stage)
	perMB := a.layer*float64(layers) + a.chunk*float64(p.VPP)
	if layers > 0 {
		perMB += a.perStash
	}
	if stage == 0 {
		perMB += a.embed
	}
	// The output layer's activations live only between the last stage's
	// forward and backward of one micro-batch (all of them under GPipe).
	head, headMBs := 0.0, 0.0
	if stage == p.PP-1 {
		head, headMBs = a.head, 1
		if p.Schedule == GPipe && p.PP > 1 {
			headMBs = float64(j.MicroBatches(p))
		}
	}
	mem.ActPerMicroBatch = ceil(perMB + head)
	mem.Act = ceil(perMB*mem.InFlight + head*headMBs + a.working)
	mem.Reserved = j.Cluster.Accel.Reserved
	mem.Workspace = ceil(j.workspace(p, stage))
	mem.Buffers = ceil(j.buffers(p, sp, stage, layers))
	mem.Other = mem.Reserved + mem.Workspace + mem.Buffers
	mem.Total = mem.Param + mem.Grad + mem.Optim + mem.Act + mem.Other
	return mem
}

// workspace is the largest transient tensor outside the stored activations:
// the all-gathered sequence-parallel input of a column-parallel GEMM
// (T·h·e), or on the last stage the output layer's logits before the loss
// converts them to fp32 (T·V/t·e).
func (j Job) workspace(p Plan, stage int) float64 {
	T := j.tokens(p)
	e := actBytes(p.Precision)
	ws := 0.0
	if p.SP {
		ws = T * float64(j.Model.Hidden) * e
	}
	if stage == p.PP-1 {
		ws = math.Max(ws, T*float64(j.Model.Vocab)/float64(p.TP)*e)
	}
	return ws
}

// bucketParams is the gradient bucket, in parameters, that data-parallel
// reduction and ZeRO-2 move at a time (Megatron's default is 40M).
const bucketParams = 40e6

// buffers are the communication buffers: ZeRO-2 keeps two gradient buckets
// (one filling, one reducing); ZeRO-3 materialises the full parameters of
// the unit being computed and of the prefetched next one, and the full
// gradients of the unit being reduced (a unit is one layer, or the
// embedding/output layer when larger); pipelines keep a send and a receive
// buffer of one boundary activation per direction.
func (j Job) buffers(p Plan, sp shapeParams, stage, layers int) float64 {
	w, g := weightBytes(p.Precision), gradBytes(p.Precision)
	b := 0.0
	switch p.ZeRO {
	case 2:
		b += 2 * math.Min(bucketParams, sp.params(stage, layers)) * g
	case 3:
		unit := sp.layer
		if stage == 0 || stage == p.PP-1 {
			unit = math.Max(unit, sp.vocab)
		}
		b += unit * (2*w + g)
	}
	if p.PP > 1 {
		b += 4 * j.boundaryBytes(p)
	}
	return b
}

// tokens is the number of tokens of one micro-batch on one device:
// T = mbs·seq/cp.
func (j Job) tokens(p Plan) float64 { return float64(p.MBS) * float64(j.Seq) / float64(p.CP) }

// boundaryBytes is the activation sent between pipeline stages per
// micro-batch: T·h·e, split over the tp ranks under sequence parallelism
// (each holds T/t tokens). Without it every tensor rank sends the whole
// activation, as Megatron-Core's p2p (get_tensor_shapes) and DeepSpeed's
// pipeline engine do; Megatron-LM's 2021 scatter/gather split (Narayanan et
// al. §4.1) is gone from Megatron-Core.
func (j Job) boundaryBytes(p Plan) float64 {
	b := j.tokens(p) * float64(j.Model.Hidden) * actBytes(p.Precision)
	if p.SP {
		b /= float64(p.TP)
	}
	return b
}
