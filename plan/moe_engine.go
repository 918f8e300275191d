package plan

import (
	"math"

	"trellis/arch"
)

// The engine's MoE layers (arch's moe.go) as the planner's engine formulas
// count them, for the plans the engine runs (EngineRefusals): the model's
// experts in the engine's declarations, the widest block's stash for every
// layer, and a stage's parameters from the engine's own layout.

// engineMoE sets the engine's MoE keys of c from m's experts: arch's MoE
// layer l ≥ dense_first with (l − dense_first) % moe_every = 0 is the
// planner's i % Every = Phase when Phase = dense_first % Every.
func engineMoE(c *arch.Config, m Model) {
	if !m.moe() {
		return
	}
	e := *m.MoE
	c.Experts, c.TopK, c.ExpertFFN, c.DenseFirst = e.Experts, e.TopK, e.FFN, e.DenseFirst
	c.MoEEvery, c.CapacityFactor = max(1, e.Every), e.CapacityFactor
	if e.Score == "sigmoid" {
		c.RouterScore = "sigmoid"
	}
	c.RouterExpertBias = e.SelectionBias // its E values a layer in the routing scratch
	if e.FFN > 0 {
		c.SharedExperts = e.SharedFFN / e.FFN
	}
}

// engineWidestBlock is the block whose stash is the largest (an MoE
// block), or −1 for a dense model: engineActivations counts every layer
// as it, so a model with dense layers among its MoE ones is over-counted
// by the difference on each dense layer (exact when every layer is MoE).
func engineWidestBlock(c arch.Config) int {
	for l := range c.Layers {
		if c.MoELayer(l) {
			return l
		}
	}
	return -1
}

// engineMoEParams corrects a stage's parameter count, which counts each
// of its layers as a dense one (perLayer parameters), to the engine's
// layout of the stage's blocks (arch's PartLayout: the router and the
// experts of its MoE blocks); 0 for a dense model.
func (j Job) engineMoEParams(p Plan, stage, layers int, perLayer float64) float64 {
	if !j.Model.moe() {
		return 0
	}
	ac, d := j.engineArch(p)
	lay := ac.PartLayout(d.Part)
	var sum float64
	for _, l := range j.stageBlocks(p, stage) {
		sum += float64(lay.Units[l+1].Size)
	}
	return sum - float64(layers)*perLayer
}

// engineChunks are the layers of the engine's model chunks under p
// (ChunkLayers: pp·vpp of them, 2·pp under DualPipeV) and whether chunk c
// is on pipeline rank k: c mod pp, or in DualPipeV's V c = k or 2pp−1−k.
func (j Job) engineChunks(p Plan) ([]int, func(c, k int) bool, error) {
	pp, v := max(1, p.PP), max(1, p.VPP)
	if p.Schedule == DualPipeV && pp > 1 {
		counts, err := ChunkLayers(j.Model.Layers, pp, 2)
		return counts, func(c, k int) bool { return c == k || c == 2*pp-1-k }, err
	}
	counts, err := ChunkLayers(j.Model.Layers, pp, v)
	return counts, func(c, k int) bool { return c%pp == k }, err
}

// stageBlocks are the blocks pipeline stage k holds: chunk c of the pp·vpp
// chunks (ChunkLayers) on stage c mod pp (engineChunks: DualPipeV's V).
func (j Job) stageBlocks(p Plan, k int) []int {
	counts, on, err := j.engineChunks(p)
	if err != nil {
		return nil
	}
	var out []int
	lo := 0
	for c, n := range counts {
		if on(c, k) {
			for l := lo; l < lo+n; l++ {
				out = append(out, l)
			}
		}
		lo += n
	}
	return out
}

// engineMoEChunk is, for an MoE model, the bytes of the blocks' part of
// the largest chunk stash of pipeline stage k (parallel/pp sizes every
// stash of a rank for it): each block's own declarations, shared as the
// recomputation mode shares them (arch's BlocksElemsAt), and each
// block's input residual.
func (j Job) engineMoEChunk(p Plan, k int) (float64, bool) {
	if !j.Model.moe() {
		return 0, false
	}
	ac, d := j.engineArch(p)
	switch p.Recompute {
	case RecomputeSelective:
		d.Recompute = arch.RecomputeSelective
	case RecomputeFull:
		d.Recompute = arch.RecomputeFull
	}
	counts, on, err := j.engineChunks(p)
	if err != nil {
		return 0, false
	}
	resid := 4 * float64(d.Tokens()) * float64(j.Model.Hidden)
	best, lo := 0.0, 0
	for c, n := range counts {
		if on(c, k) {
			best = max(best, ac.BlocksElemsAt(d, lo, lo+n, j.engineHalfStash(p)).Bytes()+float64(n)*resid)
		}
		lo += n
	}
	return best, true
}

// engineExperts is, under expert parallelism (ep > 1), the expert tensors
// of pipeline stage k's blocks on one rank (its E/ep experts of each MoE
// block, arch.Tensor.Expert) in parameters, the largest MoE block unit,
// that unit's expert part and all the stage's MoE units; zeros otherwise.
func (j Job) engineExperts(p Plan, k int) (experts, unit, unitExperts, units float64) {
	if ep, _ := p.Experts(); ep <= 1 || !j.Model.moe() {
		return 0, 0, 0, 0
	}
	ac, d := j.engineArch(p)
	lay := ac.PartLayout(d.Part)
	for _, l := range j.stageBlocks(p, k) {
		u := lay.Units[l+1]
		var e float64
		for _, t := range u.Tensors {
			if t.Expert {
				e += float64(t.Size)
			}
		}
		experts += e
		if e > 0 {
			units += float64(u.Size)
		}
		if e > 0 && float64(u.Size) > unit {
			unit, unitExperts = float64(u.Size), e
		}
	}
	return experts, unit, unitExperts, units
}

// engineEPStates replaces a rank's model states under expert parallelism
// with the engine's (train's epState: two parallel/zero instances): the
// P − P_e dense parameters sharded over N = dp·cp as before, the P_e
// expert ones over the expert-data-parallel group N_e = dp·cp/ep, and the
// MoE unit in use assembled from both (U parameters: its weights in the
// weight dtype, w bytes, to param and its gradients in fp32 to grad):
//
//	Param = states(P − P_e, N) + states(P_e, N_e) + w·U
//	        (ep_overlap=on: + w·min(U, ΣU − U), the paired forward's unit
//	        held beside the backward's while it waits on its all-to-all)
//	Grad  = … + 4U   (zb-h1: + 4·ΣU over the stage's MoE units, every
//	                  one open from its input pass to its weight pass)
//
// Under ZeRO-3 in 16-bit the per-unit roundings are the assembled unit's
// 2U and, while it is copied, the larger of its instances' two roundings
// (2·max(U − U_e, U_e)), or the largest unit's 2u.
func (j Job) engineEPStates(mem *Memory, P float64, p Plan, stage int) {
	Pe, U, Ue, all := j.engineExperts(p, stage)
	if Pe == 0 {
		return
	}
	ep, _ := p.Experts()
	pe := p
	pe.DP, pe.CP = max(1, p.DP*max(1, p.CP)/ep), 1
	var d, e Memory
	modelStates(&d, P-Pe, p)
	modelStates(&e, Pe, pe)
	w := 4.0
	if j.engineBF16(p) {
		j.engineBF16States(&d, P-Pe, p)
		j.engineBF16States(&e, Pe, pe)
		w = 2
	}
	open := U
	if p.PP > 1 && p.Schedule == ZBH1 {
		open = all
	}
	held := U
	if p.EPOverlap { // the paired forward's unit beside the backward's, when they differ
		held += math.Min(U, all-U)
	}
	mem.Param, mem.Grad, mem.Optim = d.Param+e.Param+ceil(w*held), d.Grad+e.Grad+ceil(4*open), d.Optim+e.Optim
	if j.engineBF16(p) && p.ZeRO == 3 {
		mem.Param = ceil(2 * math.Max(j.engineUnit(p), U+math.Max(U-Ue, Ue)))
	}
}
