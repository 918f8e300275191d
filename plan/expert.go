package plan

// Expert parallelism and Megatron-Core's parallel folding.
//
// The attention (and dense) layers of a plan run on the mesh TP × CP × DP
// × PP. The MoE layers run on a second mesh over the same ranks, ETP × EP
// × EDP × PP: each routed expert's MLP is split ETP ways, the E experts
// are spread over EP ranks (E/EP each), and EDP = TP·CP·DP/(ETP·EP) copies
// of that arrangement hold the same expert weights (their gradients are
// reduced, and ZeRO shards their states, over EDP). This is Megatron-Core's
// MoE Parallel Folding (megatron/core/transformer/moe/README.md, "MoE
// Parallel Folding": "a parallel group generator with tp-cp-dp-pp for
// Attention, and another with tp-ep-dp-pp for MoE. The EPxTP group in MoE is
// a sub-group of DPxCPxTP in Attention"; Liu et al. 2025). Which degrees
// must divide which, from Megatron-Core's own checks:
//
//   - ETP·EP·PP divides the world, i.e. ETP·EP divides TP·CP·DP
//     (parallel_state.initialize_model_parallel: "world_size is not
//     divisible by expert_tensor_model_pipeline_parallel size");
//   - EP divides the number of experts (each rank holds E/EP of them);
//   - ETP divides the expert MLP's width (its column- and row-parallel
//     split);
//   - the two meshes have the same pipeline groups: with PP the slowest
//     axis (order …-pp) any ETP·EP folding does; otherwise the two data-
//     parallel sizes must be equal ("When not using pp-last rank ordering,
//     the data parallel size of the attention and moe layers must be the
//     same"). The planner lays the expert mesh out pp-last and so requires
//     order …-pp for a pipelined MoE plan;
//   - with TP > 1 the MoE layers need sequence parallelism (the README:
//     "When using MoE with expert parallelism and tensor parallelism,
//     sequence parallelism must be enabled"); each tensor rank routes its
//     own T/TP tokens.
//
// Inside a pipeline stage the expert mesh is generated ETP fastest, then
// EP, then EDP (Megatron's tp-ep-dp-pp order with tp = ETP), so an EP group
// is EP ranks ETP apart, and it stays inside a node when ETP·EP does.

// expertPlacement is where the expert mesh's groups sit: n members, k on
// each node they span.
type expertPlacement struct {
	etp, ep, edp group
}

// placeExperts lays the expert mesh of p out over nodes of dpn devices:
// the pp slice is TP·CP·DP consecutive ranks (order …-pp), ETP fastest.
func placeExperts(p Plan, dpn int) expertPlacement {
	ep, etp := p.Experts()
	edp := p.TP * p.CP * p.DP / (ep * etp)
	at := func(n, stride int) group {
		k := 1
		if stride < dpn {
			k = min(n, (dpn+stride-1)/stride)
		}
		return group{n: n, k: k}
	}
	return expertPlacement{etp: at(etp, 1), ep: at(ep, etp), edp: at(edp, etp*ep)}
}

// edp is the expert data-parallel size TP·CP·DP/(ETP·EP).
func (p Plan) edp() int {
	ep, etp := p.Experts()
	return p.TP * p.CP * p.DP / (ep * etp)
}

// Keys of Result.Rejected for the expert rules.
const (
	rejExpertDense = "ep: ep or etp > 1 needs a model with experts"
	rejEP          = "ep: ep does not divide the experts"
	rejETP         = "etp: etp does not divide the expert ffn"
	rejFold        = "ep: ep·etp does not divide tp·cp·dp (parallel folding)"
	rejMoESP       = "sp: experts with tp>1 need sp=on"
	rejMoEOrder    = "order: experts with pp>1 need order …-pp"
	rejShared      = "ffn: tp does not divide the shared experts' ffn"
	rejDual        = "schedule: dualpipe(v) needs ≥ 2·pp micro-batches (dualpipe: an even number)"
)

// expertRule returns the first expert rule p breaks (key "" if none).
func (j Job) expertRule(p Plan) violation {
	m := j.Model
	ep, etp := p.Experts()
	if !m.moe() {
		if ep > 1 || etp > 1 {
			return broken(rejExpertDense, "ep=%d, etp=%d: the model %s has no experts", ep, etp, m.Name)
		}
		return violation{}
	}
	e := m.experts()
	switch {
	case e.Experts%ep != 0:
		return broken(rejEP, "ep=%d does not divide experts=%d", ep, e.Experts)
	case e.FFN%etp != 0:
		return broken(rejETP, "etp=%d does not divide the expert ffn=%d", etp, e.FFN)
	case (p.TP*p.CP*p.DP)%(ep*etp) != 0:
		return broken(rejFold, "ep·etp = %d·%d does not divide tp·cp·dp = %d·%d·%d: Megatron-Core folds the MoE layers' etp×ep×edp×pp mesh over the attention's tp×cp×dp×pp", ep, etp, p.TP, p.CP, p.DP)
	case e.SharedFFN%p.TP != 0:
		return broken(rejShared, "tp=%d does not divide the shared experts' ffn=%d", p.TP, e.SharedFFN)
	}
	return j.expertStepRule(p)
}

// expertStepRule checks sp and the rank order of an MoE plan.
func (j Job) expertStepRule(p Plan) violation {
	if !j.Model.moe() {
		return violation{}
	}
	switch {
	case p.TP > 1 && !p.SP && !j.Cluster.EngineStash: // the engine routes the replicated tokens on every tensor rank
		return broken(rejMoESP, "tp=%d with experts needs sp=on: each tensor rank routes its own tokens (Megatron-Core requires sequence parallelism with experts and tensor parallelism; the Trellis engine, whose tensor ranks all route the micro-batch, does not)", p.TP)
	case p.PP > 1 && !pipelineLast(p.Order):
		return broken(rejMoEOrder, "order=%s: with experts and pp>1 the planner lays the expert mesh out pp-last (Megatron-Core's tp-cp-ep-dp-pp); other orders need edp = dp", p.Order)
	}
	return violation{}
}

// dualRule checks DualPipe's micro-batch counts (deepseek-ai/DualPipe:
// DualPipeV needs at least 2·pp micro-batches, DualPipe an even number of
// at least 2·pp, half from each end) and that the layers split into the
// schedule's chunks.
func (j Job) dualRule(p Plan) violation {
	if !p.Schedule.dual() {
		return violation{}
	}
	m := j.MicroBatches(p)
	if m < 2*p.PP || (p.Schedule == DualPipe && m%2 != 0) {
		return broken(rejDual, "schedule=%s needs at least 2·pp = %d micro-batches%s, the job has %d", p.Schedule, 2*p.PP,
			map[bool]string{true: " (an even number)", false: ""}[p.Schedule == DualPipe], m)
	}
	if !splittable(j.Model.Layers, p.PP, p.chunks()) {
		return broken(rejLayers, "schedule=%s: %d chunks for layers=%d leaves a chunk other than the first and last without layers", p.Schedule, p.PP*p.chunks(), j.Model.Layers)
	}
	return violation{}
}

// chunks is the model chunks each pipeline rank holds: vpp, or 2 under
// DualPipeV (a V of chunks r and 2pp−1−r).
func (p Plan) chunks() int {
	if p.Schedule == DualPipeV {
		return 2
	}
	return p.VPP
}

// pipelineLast reports an order with pp the slowest axis.
func pipelineLast(order string) bool { return len(order) >= 2 && order[len(order)-2:] == "pp" }
