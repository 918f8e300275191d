package plan

import "math"

// Memory is the predicted peak memory of the most loaded device, in bytes,
// per category of the seed's formula plus Other (runtime reserve, transient
// workspaces and communication buffers).
type Memory struct {
	Param, Grad, Optim, Act, Other int64
	Total, Budget                  int64

	Stage            int     // the pipeline stage these figures are for
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
//	bf16/fp16  2        2      12 (fp32 master, m, v)           2
//	fp8        2        2      12 (fp32 master, m, v)           2
//
// fp8 keeps bf16 weights and activations outside its GEMMs (as Transformer
// Engine does); counting its saved GEMM inputs at 2 bytes is conservative.
// With ZeRO these are the K=12 and 2+2 bytes of Rajbhandari et al. 2020.
func weightBytes(p Precision) float64 {
	if p == FP32 {
		return 4
	}
	return 2
}

func optimBytes(p Precision) float64 {
	if p == FP32 {
		return 8
	}
	return 12
}

func actBytes(p Precision) float64 { return weightBytes(p) }

// stageParams is the number of parameters one device of pipeline stage
// `stage` holds: its L/pp layers split tp ways (matrices and the biases of
// column-parallel layers split; norms and row-parallel biases replicated),
// plus the vocab-parallel embedding and learned positions on the first
// stage, plus the final norm and the output layer on the last (a tied
// output layer is a second copy when the two stages differ, as in
// Megatron).
func (j Job) stageParams(p Plan, stage int) float64 {
	return j.shapeParams(p.TP, p.PP).stage(p, stage)
}

// shapeParams are the parameter counts that depend on tp and pp only,
// computed once per shape.
type shapeParams struct {
	first, mid, last float64 // one device of stage 0, of a middle stage, of stage pp-1
	layer            float64 // one layer on one tensor rank
	vocab            float64 // V·h/t: a vocab-parallel embedding or output layer shard
}

func (sp shapeParams) stage(p Plan, s int) float64 {
	switch s {
	case p.PP - 1:
		return sp.last
	case 0:
		return sp.first
	}
	return sp.mid
}

func (j Job) shapeParams(tp, pp int) shapeParams {
	m := j.Model
	t := float64(tp)
	sp := shapeParams{layer: m.layerParamsTP(t), vocab: float64(m.Vocab) * float64(m.Hidden) / t}
	sp.mid = float64(m.Layers/pp) * sp.layer
	sp.first = sp.mid + sp.vocab
	if m.Family == GPT {
		sp.first += float64(m.MaxSeq) * float64(m.Hidden)
	}
	head := float64(m.normParams())
	if !m.Tied || pp > 1 {
		head += sp.vocab
	}
	if pp == 1 {
		sp.first += head
		sp.last = sp.first
	} else {
		sp.last = sp.mid + head
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
//	Param = P·w / (N if zero=3)      Grad = P·w / (N if zero≥2)
//	Optim = P·k / (N if zero≥1)      w = 2 (4 for fp32), k = 12 (8 for fp32)
func modelStates(mem *Memory, P float64, p Plan) {
	n := float64(p.DP * p.CP)
	w, k := weightBytes(p.Precision), optimBytes(p.Precision)
	shard := func(stage int) float64 {
		if p.ZeRO >= stage {
			return n
		}
		return 1
	}
	mem.Param = ceil(P * w / shard(3))
	mem.Grad = ceil(P * w / shard(2))
	mem.Optim = ceil(P * k / shard(1))
}

func ceil(x float64) int64 { return int64(math.Ceil(x)) }

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
// larger of the first and last pipeline stages (the first holds the most
// micro-batches in flight, the last the output layer and the logits).
func (j Job) Memory(p Plan) Memory { return j.memory(p, j.shapeParams(p.TP, p.PP)) }

func (j Job) memory(p Plan, sp shapeParams) Memory {
	a := j.activations(p)
	first := j.stageMemory(p, sp, a, 0)
	if p.PP == 1 {
		return first
	}
	if last := j.stageMemory(p, sp, a, p.PP-1); last.Total > first.Total {
		return last
	}
	return first
}

func (j Job) stageMemory(p Plan, sp shapeParams, a actSizes, stage int) Memory {
	mem := Memory{Stage: stage, Budget: j.Cluster.Accel.Memory}
	modelStates(&mem, sp.stage(p, stage), p)
	mem.InFlight = j.inFlight(p, stage)
	perMB := a.layer * float64(j.Model.Layers/p.PP)
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
	mem.Buffers = ceil(j.buffers(p, sp, stage))
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
func (j Job) buffers(p Plan, sp shapeParams, stage int) float64 {
	w := weightBytes(p.Precision)
	b := 0.0
	switch p.ZeRO {
	case 2:
		b += 2 * math.Min(bucketParams, sp.stage(p, stage)) * w
	case 3:
		unit := sp.layer
		if stage == 0 || stage == p.PP-1 {
			unit = math.Max(unit, sp.vocab)
		}
		b += 3 * unit * w
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
// micro-batch: T·h·e, split over the tp ranks (sequence parallelism, or
// Megatron's scatter/gather optimisation without it).
func (j Job) boundaryBytes(p Plan) float64 {
	return j.tokens(p) * float64(j.Model.Hidden) * actBytes(p.Precision) / float64(p.TP)
}
