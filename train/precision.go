package train

import (
	"fmt"
	"strings"

	"trellis/model"
	"trellis/optim"
	"trellis/plan"
	"trellis/tensor"
)

// computeType is the linear layers' GEMM precision for a plan's precision:
// bf16 runs them in bf16 with fp32 master weights, Adam moments, gradients
// and reductions (Megatron's convention, the planner's plan/memory.go);
// everything else in fp32. checkSupported refuses the rest by name.
func computeType(p plan.Precision) tensor.DType {
	switch p {
	case plan.BF16:
		return tensor.BF16
	case plan.FP16:
		return tensor.F16
	}
	return tensor.F32
}

// zeroHalf is parallel/zero's Config.Half for a plan: under ZeRO-1/2 in
// bf16 or fp16 on whole layers the master weights are sharded with the
// moments and the weights held and gathered in 16-bit (the runner then
// keeps a unit's 16-bit copy only while it is fetched, HalfPerUnit);
// otherwise fp32 (ZeRO-3's fp32 chunks are the master weights already, a
// tensor-parallel rank's passes read fp32 weights, and a pipeline's state
// is parallel/pp's).
func zeroHalf(p plan.Plan) tensor.DType {
	if (p.ZeRO == 1 || p.ZeRO == 2) && p.TP == 1 && p.PP == 1 {
		return computeType(p.Precision)
	}
	return tensor.F32
}

// halfEstimate turns estimate's fp32 state and runner into a bf16 or
// fp16 plan's (nothing in fp32): the state of docs/ARCHITECTURE.md's
// table without its unit terms (a lower bound), Ψ parameters over N
// ranks,
//
//	zero=0  2Ψ + 4Ψ + 12Ψ      zero=1  2Ψ + 4Ψ + 12Ψ/N
//	zero=2  2Ψ + 16Ψ/N         zero=3  16Ψ/N
//
// and the stash less halfStashSaving, plus ZeRO-1/2's widened unit (4u).
func halfEstimate(e *memEstimate, m model.Config, microBatch int, p plan.Plan) {
	if computeType(p.Precision) == tensor.F32 {
		return
	}
	psi, n := e.params, float64(max(1, p.DP))
	switch p.ZeRO {
	case 0:
		e.state = 18 * psi
	case 1:
		e.state = 6*psi + 12*psi/n
	case 2:
		e.state = 2*psi + 16*psi/n
	default:
		e.state = 16 * psi / n
	}
	e.runner -= halfStashSaving(m, microBatch, p)
	if zeroHalf(p) != tensor.F32 {
		C := float64(m.Hidden)
		e.runner += 4 * max(12*C*C+13*C, float64(m.Vocab+m.SeqLen)*C)
	}
}

// halfStashSaving is what a 16-bit stash (bf16 or fp16,
// model/stash16.go) takes off the fp32 stash, in bytes: 2 of the 4 bytes
// of each layer's ln1, qkv, atty, ln2, fc and fcg (14·BTC) and of ln_f
// (BTC), one layer's with full recomputation; 0 in fp32. Like the
// estimate's stash it is the whole model's (under tp too, where the
// stash is as much 16-bit on the rank's slices).
func halfStashSaving(m model.Config, microBatch int, p plan.Plan) float64 {
	if computeType(p.Precision) == tensor.F32 {
		return 0
	}
	BTC := float64(microBatch) * float64(m.SeqLen) * float64(m.Hidden)
	layers := float64(m.Layers)
	if p.Recompute == plan.RecomputeFull && m.Layers > 0 {
		layers = 1
	}
	return 2 * (14*layers + 1) * BTC
}

// scaledUpdater is the Update of fp16 loss scaling (parallel/single and
// parallel/zero; dp has single's): see single.Strategy.UpdateScaled.
type scaledUpdater interface {
	UpdateScaled(lr, maxNorm, inv float64) (norm float64, skipped bool, err error)
}

// newScaler is fp16's loss scaler (nil for every other precision), from
// train.loss_scale and train.loss_scale_window (0: 65536 and 1000).
func newScaler(p plan.Precision, c Config) (*optim.LossScaler, error) {
	if p != plan.FP16 {
		return nil, nil
	}
	scale, window := c.LossScale, c.LossScaleWindow
	if scale == 0 {
		scale = 65536
	}
	if window == 0 {
		window = 1000
	}
	return optim.NewLossScaler(scale, window)
}

// update is the step's optimizer update: Strategy.Update, or under fp16
// UpdateScaled with the scaler's 1/S, skipping a step whose gradients
// overflowed (res.skipped) and updating the scale.
func (r *rank) update(res *stepResult) error {
	if r.scaler == nil {
		norm, err := r.st.Update(res.lr, r.job.Train.GradClip)
		res.norm = norm
		return err
	}
	su, ok := r.st.(scaledUpdater)
	if !ok {
		return fmt.Errorf("train: precision=fp16: the strategy %T has no loss-scaled update", r.st)
	}
	res.scale = r.scaler.Scale
	norm, skipped, err := su.UpdateScaled(res.lr, r.job.Train.GradClip, 1/r.scaler.Scale)
	if err != nil {
		return err
	}
	res.norm, res.skipped = norm, skipped
	r.scaler.Update(skipped)
	return nil
}

// dlossScale is what the backward pass multiplies the loss by: S under
// fp16, else 1.
func (r *rank) dlossScale() float64 {
	if r.scaler == nil {
		return 1
	}
	return r.scaler.Scale
}

// runPlanText is the plan as the run line shows it: Short, which leaves
// out the planner's defaults (bf16 and flash=on among them), with the
// precision and flash attention always named.
func runPlanText(p plan.Plan) string {
	s := p.Short()
	for _, k := range []string{"precision", "flash"} { // the planner's defaults are not the engine's: name them
		if !strings.Contains(s, k+"=") {
			s += "," + k + "=" + p.Get(k)
		}
	}
	return s
}

// withScale adds the loss scaler's state to a checkpoint's meta.
func (r *rank) withScale(m Meta) Meta {
	if r.scaler != nil {
		m.LossScale, m.LossScaleClean, m.SkippedSteps = r.scaler.Scale, r.scaler.Clean, r.scaler.Skipped
	}
	return m
}

// restoreScale resumes the loss scaler from a checkpoint's meta (one saved
// by another precision keeps the configured start).
func (r *rank) restoreScale(m Meta) {
	if r.scaler != nil && m.LossScale >= 1 {
		r.scaler.Scale, r.scaler.Clean, r.scaler.Skipped = m.LossScale, m.LossScaleClean, m.SkippedSteps
	}
}
