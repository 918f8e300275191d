package plan

import (
	"fmt"
	"math"
)

// Estimate is the planner's prediction for one plan of one job.
type Estimate struct {
	Plan   Plan
	Memory Memory
	Time   Time
	// Variants are plans that differ from Plan only in the rank order or
	// the number of interleaved chunks and predict the same time and
	// memory within 0.05% and 1% (set by Search, which lists them as one
	// choice; see equivalent).
	Variants []Plan

	ModelFLOPs float64 // per step, all devices: forward + backward of the model
	HWFLOPs    float64 // ModelFLOPs plus recomputation

	TFLOPsPerDevice   float64 // ModelFLOPs / step / devices, in TFLOP/s
	HWTFLOPsPerDevice float64
	MFU, HFU          float64 // the two above over the device's peak for the plan's precision
	TokensPerS        float64
}

// Fits reports whether the plan fits in device memory.
func (e Estimate) Fits() bool { return e.Memory.Fits() }

// FLOPs counts one step's floating-point operations over all devices:
//
//	F_fwd/token = L·(2·P_mat + 4·s·a·d) + 2·h·V
//	model       = 3 · tokens · F_fwd/token          (forward + backward = 2× forward)
//	hardware    = model + recomputed forwards: full: tokens·L·(2·P_mat + 4·s·a·d);
//	              selective without flash: tokens·L·4·s·a·d
//
// P_mat is one layer's matrix parameters and 4·s·a·d the attention scores
// and their product with V over the full s×s (the convention of Narayanan
// et al. 2021, whose 96·B·s·l·h²(1 + s/6h + V/16lh) this equals for GPT
// with full recomputation; 72·B·s·l·h²(1 + s/6h + V/12lh) without).
func (j Job) FLOPs(p Plan) (model, hw float64) {
	m := j.Model
	tokens := float64(j.GlobalBatch) * float64(j.Seq)
	attn := 4 * float64(j.Seq) * float64(m.Heads) * float64(m.HD())
	layer := 2*float64(m.LayerMatrixParams()) + attn
	fwd := float64(m.Layers)*layer + 2*float64(m.Hidden)*float64(m.Vocab)
	model = 3 * tokens * fwd
	hw = model
	switch {
	case p.Recompute == RecomputeFull:
		hw += tokens * float64(m.Layers) * layer
	case p.Recompute == RecomputeSelective && !p.Flash:
		hw += tokens * float64(m.Layers) * attn
	}
	return model, hw
}

// Evaluate checks p against the job and predicts its memory and step time.
// A plan that does not fit in memory is still evaluated (Fits says so).
func (j Job) Evaluate(p Plan) (Estimate, error) {
	if err := j.Validate(); err != nil {
		return Estimate{}, err
	}
	if err := j.Check(p); err != nil {
		return Estimate{}, err
	}
	return j.estimate(p, place(p, j.Cluster.DevicesPerNode)), nil
}

// estimate assumes p passed Check.
func (j Job) estimate(p Plan, pl placement) Estimate {
	j = j.polledHost()
	pl = j.onHost(p, pl)
	if j.useGeneral(p) {
		return j.generalEstimate(p, pl)
	}
	sp := j.shapeParams(p)
	return j.finish(p, pl, j.layerCost(p, pl), j.memory(p, sp), sp)
}

// stepTime composes the pipeline: with m micro-batches and stage times t_s
// (one micro-batch's forward and backward, exposed per-micro-batch
// communication included), the slowest stage sets the pace and the fill
// and drain add (pp-1)/vpp mean stage times (the bubble; Narayanan et al.
// 2021: (p-1)/(v·m) of the ideal time):
//
//	T_step = m·max_s t_s + (pp-1)/vpp · mean_s t_s + DP exposed + optimizer
//
// The slowest stage is the first (embedding), the last (output layer and
// loss) or, under an uneven split, a middle stage holding the most layers.
// GPipe's bubble equals 1F1B's; it differs in memory. Zero-bubble H1 (Qi
// et al. 2023) splits each backward into B (input gradient) and W (weight
// gradient) and runs the W passes in the cool-down, so its bubble is
// (pp−1)·(mean − 2·W), W the mean stage's weight-gradient GEMMs: a third
// of 1F1B's when F = B = W.
func (j Job) stepTime(p Plan, pl placement, lc layerCost, sp shapeParams) Time {
	pt := sp.pt
	first := j.stage(p, pl, lc, sp, 0)
	last, mid := first, first
	if p.PP > 1 {
		last = j.stage(p, pl, lc, sp, p.PP-1)
	}
	slow, slowStage := first, 0
	if last.total() > first.total() {
		slow, slowStage = last, p.PP-1
	}
	if p.PP > 2 {
		mid = j.stage(p, pl, lc, sp, pt.midRank)
		if mid.total() > slow.total() {
			slow, slowStage = mid, pt.midRank
		}
	}
	m := float64(j.MicroBatches(p))
	var t Time
	t.MicroBatches = j.MicroBatches(p)
	t.StageTime, t.SlowStage = slow.total(), slowStage
	mean, meanCompute := slow.total(), slow.compute.total()
	if p.PP > 1 {
		// The middle stages hold L − first − last layers in all; each
		// costs mid's time less the layers it lacks.
		perLayer := lc.compute.total() + lc.tp + lc.cp
		lacking := float64((p.PP-2)*pt.mid - (j.Model.Layers - pt.first - pt.last))
		middle := float64(p.PP-2)*mid.total() - lacking*perLayer
		mean = (first.total() + last.total() + middle) / float64(p.PP)
		middleCompute := float64(p.PP-2)*mid.compute.total() - lacking*lc.compute.total()
		meanCompute = (first.compute.total() + last.compute.total() + middleCompute) / float64(p.PP)
	}
	t.Compute = m * slow.compute.total()
	t.TP, t.CP, t.PP = m*slow.tp, m*slow.cp, m*slow.pp
	t.DP = m*slow.zero + j.stepComm(p, pl, sp, first, last)
	t.CommExposed = t.TP + t.CP + t.PP + t.DP
	t.Bubble = float64(p.PP-1) / float64(p.VPP) * mean
	if p.Schedule == ZBH1 {
		// The deferred W passes fill the cool-down: (p−1)(F+B−2W) with
		// F+B the mean stage time and W its weight-gradient GEMMs.
		w := lc.compute.wgt * float64(j.Model.Layers) / float64(p.PP)
		t.Bubble = float64(p.PP-1) * math.Max(0, mean-2*w)
	}
	t.Optimizer = j.optimizerTime(p, sp, lc.k)
	t.Misc = t.Optimizer
	t.Step = t.Compute + t.CommExposed + t.Bubble + t.Misc
	pipe := j.pipeHost(p, t.MicroBatches, slow.compute)
	if pipe != nil { // each lane at its own stage's pace
		pipe.fs, pipe.bs = make([]float64, p.PP), make([]float64, p.PP)
		for s := range p.PP {
			sc := first
			switch {
			case s == p.PP-1:
				sc = last
			case s > 0:
				sc = j.stage(p, pl, lc, sp, s)
			}
			pipe.fs[s], pipe.bs[s] = sc.compute.fwd, sc.compute.bwd+sc.compute.rc
		}
	}
	return j.hostTime(t, m*meanCompute, pipe)
}

// Why explains, in numbers, why a plan does not fit: which category
// dominates and what the schedule keeps in flight.
func (e Estimate) Why() string {
	m := e.Memory
	if m.Fits() {
		return ""
	}
	parts := []struct {
		name string
		v    int64
	}{{"parameters", m.Param}, {"gradients", m.Grad}, {"optimizer states", m.Optim}, {"activations", m.Act}, {"other", m.Other}}
	big := parts[0]
	for _, p := range parts[1:] {
		if p.v > big.v {
			big = p
		}
	}
	s := fmt.Sprintf("needs %s > %s: %s %s", Bytes(m.Total), Bytes(m.Budget), big.name, Bytes(big.v))
	if big.name == "activations" {
		s += fmt.Sprintf(" (%s keeps %s on stage %d, %s each)",
			e.Plan.Schedule, microBatches(m.InFlight), m.Stage, Bytes(m.ActPerMicroBatch))
	}
	return s
}

func microBatches(x float64) string {
	if x == 1 {
		return "1 micro-batch"
	}
	return trimFloat(x) + " micro-batches"
}

func trimFloat(x float64) string {
	if x == math.Trunc(x) {
		return fmt.Sprintf("%d", int64(x))
	}
	return fmt.Sprintf("%.2f", x)
}
