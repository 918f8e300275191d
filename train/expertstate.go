package train

import (
	"fmt"
	"math"

	"trellis/arch"
	"trellis/checkpoint"
	"trellis/comm"
	"trellis/device"
	"trellis/model"
	"trellis/parallel"
	"trellis/parallel/flat"
	"trellis/parallel/zero"
	"trellis/precision"
	"trellis/tensor"
)

// epState is an expert-parallel rank's state: two parallel/zero
// instances, one over the dense tensors of the rank's units reduced (and
// ZeRO-sharded) over the reduction group (dp), one over the rank's expert
// tensors (its E/ep experts of every MoE block, arch.Tensor.Expert)
// reduced and sharded over the expert-data-parallel group (edp, dp/ep
// ranks holding the same experts). It is the model.Params the passes run
// on: a dense unit is the dense instance's, an MoE block's unit is
// assembled from both.
//
// Gradients. The loss is the mean over the global batch; each rank's
// backward starts from dloss/accum of its own tokens, so the dense
// instance's mean over dp is the single device's gradient. An expert's
// gradient on its rank already sums the rows of every rank of its ep
// group (the combine's backward), so its gradient is
//
//	g_e = (1/dp) Σ_{r ∈ dp} ∇_e L_r = (1/ep) · Avg_{edp} (Σ_{q ∈ ep} ∇_e L_q)
//
// — the expert instance averages over edp (dp/ep ranks), and GradsDone
// scales the rank's expert rows by 1/ep as it hands them over.
//
// The gradient norm for clipping is
//
//	‖g‖² = ‖g_dense‖² + ‖g_expert‖²
//
// the dense squares summed over dp when sharded, the experts' over edp
// when sharded and over ep (each ep rank holds other experts), their sum
// then over the pipeline and the tensor-parallel group; both instances
// clip with the one norm. AdamW is per element, so the update is the
// single device's. A pipeline stage of dense blocks only has no expert
// instance (its expert squares are 0; its ep group issues nothing).
//
// An MoE unit's weights are copied into a unit buffer (the policy's Param
// dtype, tag param) from Weights to its last ReleaseWeights, each
// instance's released as soon as it is copied (ZeRO-3 frees its gathered
// bucket); its gradients accumulate in an fp32 unit buffer (tag grad)
// from its first Grads of a backward pass to its GradsDone, which adds
// them into the two instances' gradients.
type epState struct {
	dense, expert *zero.Strategy
	split         map[int]*epUnit
	scale         float32      // 1/ep
	norm          []comm.Group // the norm's sums after dp and ep: the pipeline's, the tensor-parallel one
	stages        comm.Group   // the one of norm over a pipeline's stages (nil: none)
	// track and onStages account the norm's sums' waits: over stages on
	// onStages (StageStats: the pipeline's drain waits there), the rest
	// on track (both part of CommStats).
	track, onStages flat.Tracker
	dev             *device.Device
	pol             precision.Policy
}

// epUnit is one MoE block unit: its tensors' places in the unit and in
// the two instances' units, and its buffers while in use.
type epUnit struct {
	size          int
	dense, expert []epRun
	w             *device.Buffer
	refs          int
	g             *device.Buffer
}

// epRun is one tensor's elements: at off in the model's unit, at at in
// its instance's unit, n of them.
type epRun struct{ off, at, n int }

// splitExperts cuts a rank's layout into its dense tensors (every unit)
// and its expert tensors (the MoE units'), each laid out back to back,
// and the runs of every MoE unit.
func splitExperts(lay arch.Layout) (dense, expert arch.Layout, split map[int]*epUnit) {
	split = map[int]*epUnit{}
	add := func(out *arch.Layout, src arch.Unit, keep func(arch.Tensor) bool) (runs []epRun) {
		un := arch.Unit{Name: src.Name, Index: src.Index, Offset: out.Size}
		for _, t := range src.Tensors {
			if !keep(t) {
				continue
			}
			runs = append(runs, epRun{off: t.Offset - src.Offset, at: out.Size - un.Offset, n: t.Size})
			t.Offset = out.Size
			out.Size += t.Size
			un.Tensors = append(un.Tensors, t)
		}
		if un.Size = out.Size - un.Offset; len(un.Tensors) > 0 {
			out.Units = append(out.Units, un)
		}
		return runs
	}
	for _, u := range lay.Units {
		d := add(&dense, u, func(t arch.Tensor) bool { return !t.Expert })
		e := add(&expert, u, func(t arch.Tensor) bool { return t.Expert })
		if len(e) > 0 {
			split[u.Index] = &epUnit{size: u.Size, dense: d, expert: e}
		}
	}
	return dense, expert, split
}

// newEPState builds the two instances from the dense configuration zc
// (the rank's whole layout, groups and settings): the expert instance
// over edp, its norm summed over ep and then the pipeline.
func newEPState(zc zero.Config, t *topology) (*epState, error) {
	dl, el, split := splitExperts(zc.Layout)
	s := &epState{split: split, scale: 1 / float32(t.part.EP), dev: zc.Device, pol: zc.Precision,
		norm: zc.NormGroups, stages: zc.Stages}
	dc, ec := zc, zc
	dc.Layout, dc.NormGroups = dl, nil
	ec.Layout, ec.Grads, ec.Params, ec.Copy = el, t.edp, t.edp, nil
	ec.Tied, ec.TiedUnits = nil, nil
	ec.NormGroups = []comm.Group{t.ep}
	keep := func(us []int) []int {
		var out []int
		for _, u := range us {
			if _, ok := split[u]; ok {
				out = append(out, u)
			}
		}
		return out
	}
	ec.Order = zero.Order{Train: keep(zc.Order.Train), Eval: keep(zc.Order.Eval)}
	var err error
	if s.dense, err = zero.New(dc); err != nil {
		return nil, err
	}
	if len(el.Units) == 0 { // a pipeline stage of dense blocks only
		return s, nil
	}
	if s.expert, err = zero.New(ec); err != nil {
		s.dense.Free()
		return nil, fmt.Errorf("train: the experts' state: %w", err)
	}
	return s, nil
}

var _ parallel.Strategy = (*epState)(nil)

// copyBuf copies src's elements into dst (the same dtype).
func copyBuf(dst, src tensor.Buf) {
	if src.DType() == tensor.F32 {
		copy(dst.F32(), src.F32())
		return
	}
	copy(dst.Bits(), src.Bits())
}

// Weights is unit u's weights: the dense instance's, or an MoE unit
// assembled from both instances' into its unit buffer.
func (s *epState) Weights(u int) (tensor.Buf, error) {
	eu, ok := s.split[u]
	if !ok {
		return s.dense.Weights(u)
	}
	if eu.refs > 0 {
		eu.refs++
		return eu.w.Buf(), nil
	}
	buf, err := s.dev.AllocOf(device.Param, s.pol.Param, eu.size)
	if err != nil {
		return tensor.Buf{}, fmt.Errorf("train: the weights of MoE unit %d: %w", u, err)
	}
	for _, part := range []struct {
		st   *zero.Strategy
		runs []epRun
	}{{s.dense, eu.dense}, {s.expert, eu.expert}} {
		w, err := part.st.Weights(u)
		if err != nil {
			buf.Free()
			return tensor.Buf{}, err
		}
		dst := buf.Buf()
		for _, r := range part.runs {
			copyBuf(dst.Slice(r.off, r.off+r.n), w.Slice(r.at, r.at+r.n))
		}
		part.st.ReleaseWeights(u)
	}
	eu.w, eu.refs = buf, 1
	return buf.Buf(), nil
}

// ReleaseWeights frees an MoE unit's buffer with its last use.
func (s *epState) ReleaseWeights(u int) {
	eu, ok := s.split[u]
	if !ok {
		s.dense.ReleaseWeights(u)
		return
	}
	if eu.refs == 0 {
		return
	}
	if eu.refs--; eu.refs == 0 {
		eu.w.Free()
		eu.w = nil
	}
}

// Grads is unit u's gradient buffer: the dense instance's, or an MoE
// unit's buffer, zeroed at the first Grads after its GradsDone.
func (s *epState) Grads(u int) ([]float32, error) {
	eu, ok := s.split[u]
	if !ok {
		return s.dense.Grads(u)
	}
	if eu.g == nil {
		buf, err := s.dev.Alloc(device.Grad, eu.size) // zeroed
		if err != nil {
			return nil, fmt.Errorf("train: the gradients of MoE unit %d: %w", u, err)
		}
		eu.g = buf
	}
	return eu.g.Data, nil
}

// GradsDone adds an MoE unit's gradients into the instances' (the
// experts' scaled by 1/ep) and marks the unit done on both.
func (s *epState) GradsDone(u int) error {
	eu, ok := s.split[u]
	if !ok {
		return s.dense.GradsDone(u)
	}
	if eu.g == nil {
		return fmt.Errorf("train: GradsDone(%d) without Grads", u)
	}
	g := eu.g.Data
	dg, err := s.dense.Grads(u)
	if err != nil {
		return err
	}
	for _, r := range eu.dense {
		d, src := dg[r.at:r.at+r.n], g[r.off:r.off+r.n]
		for i, v := range src {
			d[i] += v
		}
	}
	if err := s.dense.GradsDone(u); err != nil {
		return err
	}
	eg, err := s.expert.Grads(u)
	if err != nil {
		return err
	}
	for _, r := range eu.expert {
		d, src := eg[r.at:r.at+r.n], g[r.off:r.off+r.n]
		for i, v := range src {
			d[i] += s.scale * v
		}
	}
	eu.g.Free()
	eu.g = nil
	return s.expert.GradsDone(u)
}

// Init writes both instances' initial weights.
func (s *epState) Init(in model.Init) error {
	if err := s.dense.Init(in); err != nil || s.expert == nil {
		return err
	}
	return s.expert.Init(in)
}

// BeginStep zeroes both instances' gradients.
func (s *epState) BeginStep(accum int) error {
	if err := s.dense.BeginStep(accum); err != nil || s.expert == nil {
		return err
	}
	return s.expert.BeginStep(accum)
}

// FinishGrads completes both instances' reductions.
func (s *epState) FinishGrads() error {
	if err := s.dense.FinishGrads(); err != nil || s.expert == nil {
		return err
	}
	return s.expert.FinishGrads()
}

// Update clips both instances with the one global norm (the doc's
// ‖g‖² = ‖g_dense‖² + ‖g_expert‖²: the dense squares summed over dp when
// sharded, the experts' over edp when sharded and over ep, their sum then
// over the pipeline and the tensor-parallel group) and applies AdamW to
// each.
func (s *epState) Update(u parallel.Update) (parallel.Updated, error) {
	sq, err := s.dense.SquaredNorm()
	if err != nil {
		return parallel.Updated{}, err
	}
	if s.expert != nil {
		e, err := s.expert.SquaredNorm()
		if err != nil {
			return parallel.Updated{}, err
		}
		sq += e
	}
	for _, g := range s.norm {
		track := &s.track
		if g == s.stages {
			track = &s.onStages
		}
		if sq, err = sumFloat64(track, g, sq); err != nil {
			return parallel.Updated{}, fmt.Errorf("train: gradient norm: %w", err)
		}
	}
	n := math.Sqrt(sq)
	out, err := s.dense.Apply(u, n)
	if err != nil || s.expert == nil {
		return out, err
	}
	if _, err := s.expert.Apply(u, n); err != nil {
		return out, err
	}
	return out, nil
}

// sumFloat64 is x summed over g, x travelling as two float32s (hi =
// fl32(x), lo = fl32(x − hi)) as parallel/zero sums its norm's partials,
// its wait accounted on track.
func sumFloat64(track *flat.Tracker, g comm.Group, x float64) (float64, error) {
	if g == nil || g.Size() == 1 {
		return x, nil
	}
	hi := float32(x)
	buf := []float32{hi, float32(x - float64(hi))}
	if err := track.Watch(g.AllReduce(comm.F32(buf), comm.Sum), nil).Wait(); err != nil {
		return 0, err
	}
	return float64(buf[0]) + float64(buf[1]), nil
}

// Shards is both instances' parts (the experts' with their places in the
// global tensors).
func (s *epState) Shards() ([]checkpoint.Shard, error) {
	d, err := s.dense.Shards()
	if err != nil {
		return nil, err
	}
	if s.expert == nil {
		return d, nil
	}
	e, err := s.expert.Shards()
	if err != nil {
		return nil, err
	}
	return append(d, e...), nil
}

// Restore loads both instances from a checkpoint of any plan.
func (s *epState) Restore(c *checkpoint.Checkpoint, optSteps int) error {
	if err := s.dense.Restore(c, optSteps); err != nil || s.expert == nil {
		return err
	}
	return s.expert.Restore(c, optSteps)
}

// OptimizerSteps is the updates applied (both instances step together).
func (s *epState) OptimizerSteps() int { return s.dense.OptimizerSteps() }

// CommStats is both instances' communication and the norm's sums'
// waits.
func (s *epState) CommStats() comm.Stats {
	st := s.dense.CommStats().Add(s.track.Stats()).Add(s.onStages.Stats())
	if s.expert == nil {
		return st
	}
	return st.Add(s.expert.CommStats())
}

// StageStats is both instances' and the norm's sum's over the stages.
func (s *epState) StageStats() comm.Stats {
	st := s.dense.StageStats().Add(s.onStages.Stats())
	if s.expert == nil {
		return st
	}
	return st.Add(s.expert.StageStats())
}

// Free returns both instances' memory and the units' buffers.
func (s *epState) Free() {
	for _, eu := range s.split {
		eu.w.Free()
		eu.g.Free()
		eu.w, eu.g, eu.refs = nil, nil, 0
	}
	s.dense.Free()
	if s.expert != nil {
		s.expert.Free()
	}
}
