package plan

import (
	"fmt"
	"math"
)

// Job is what is being planned: a model, a cluster, how many of its devices,
// the sequence length and the global batch (in sequences) of one step.
type Job struct {
	Model       Model
	Cluster     Cluster
	Devices     int
	Seq         int
	GlobalBatch int
	// Engine, when set on a cluster with engine_stash, is what the Trellis
	// engine stores besides its stash (EngineStore); nil: its defaults.
	Engine *EngineStore
	// Imbalance is the routed-token load of the busiest expert-parallel
	// rank over its balanced share (0 or 1: balanced, as the published
	// benchmarks force it; 1.5: "what if the busiest expert gets 1.5× its
	// share"). It sets that rank's expert GEMMs, all-to-all and dispatch
	// buffers, and so the pace (moecost.go).
	Imbalance float64
}

// imbalance is Job.Imbalance with 0 read as 1.
func (j Job) imbalance() float64 { return math.Max(1, j.Imbalance) }

// Validate checks the job on its own (not a plan).
func (j Job) Validate() error {
	if err := j.Model.Validate(); err != nil {
		return err
	}
	if err := j.Cluster.Validate(); err != nil {
		return err
	}
	switch {
	case j.Devices < 1 || j.Devices > 1<<24:
		return fmt.Errorf("plan: devices=%d: want 1..%d", j.Devices, 1<<24)
	case j.Seq < 1 || j.Seq > 1<<24:
		return fmt.Errorf("plan: seq=%d: want 1..%d", j.Seq, 1<<24)
	case j.GlobalBatch < 1 || j.GlobalBatch > 1<<24:
		return fmt.Errorf("plan: global batch=%d: want 1..%d", j.GlobalBatch, 1<<24)
	case j.Model.learnedPositions() && j.Seq > j.Model.MaxSeq:
		return fmt.Errorf("plan: seq=%d exceeds the %d learned positions of %s", j.Seq, j.Model.MaxSeq, j.Model.Name)
	case j.Imbalance != 0 && !(j.Imbalance >= 1 && j.Imbalance <= 64):
		return fmt.Errorf("plan: imbalance=%g: want 1 (balanced) up to 64 (the busiest expert-parallel rank's load over its share)", j.Imbalance)
	case j.Imbalance > 1 && !j.Model.moe():
		return fmt.Errorf("plan: imbalance=%g: the model %s has no experts", j.Imbalance, j.Model.Name)
	}
	return nil
}

// MicroBatches is the number of micro-batches each data-parallel replica
// runs per step: m = GlobalBatch / (DP·MBS); 0 for a plan whose dp·mbs is
// not a positive count (one that fails Validate).
func (j Job) MicroBatches(p Plan) int {
	n, ok := product(math.MaxInt, p.DP, p.MBS)
	if !ok {
		return 0
	}
	return j.GlobalBatch / n
}

// Check validates p for this job: Plan.Validate, then every rule that
// involves the model, the cluster, the sequence or the batch. The error
// names the keys and the rule, e.g. "tp=3 does not divide heads=8".
func (j Job) Check(p Plan) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if r := j.rule(p); r.key != "" {
		return invalid(r.format, r.args...)
	}
	return nil
}

// violation is a broken rule: key groups it in Result.Rejected, format and
// args say it with the numbers (formatted only if the error is printed).
type violation struct {
	key    string
	format string
	args   []any
}

func broken(key, format string, args ...any) violation {
	return violation{key: key, format: format, args: args}
}

// Keys of Result.Rejected: the rule a candidate broke.
const (
	rejDevices     = "devices: dp·tp·pp·cp is not the device count"
	rejHeads       = "heads: tp does not divide heads"
	rejKVHeads     = "kv_heads: tp does not divide kv_heads"
	rejFFN         = "ffn: tp does not divide ffn"
	rejSeq         = "seq: 2·cp does not divide seq"
	rejLayers      = "layers: pp·vpp leaves a middle pipeline chunk without layers"
	rejBatch       = "batch: dp·mbs does not divide the global batch"
	rejSP          = "sp: tp does not divide the tokens per cp rank"
	rejSPTP        = "sp: sp=on needs tp>1"
	rejInterleaved = "schedule: interleaved needs pp to divide the micro-batches"
	rejPrecision   = "precision: not supported by the device"
	rejMemory      = "memory: over the device budget"
	rejFix         = "fix: no plan has the pinned values"
)

// rule returns the first model-dependent rule p breaks (key "" if none).
func (j Job) rule(p Plan) violation {
	if r := j.shapeRule(p.TP, p.CP, p.PP); r.key != "" {
		return r
	}
	m := j.Model
	switch {
	case p.Devices() != j.Devices:
		return broken(rejDevices, "dp·tp·pp·cp = %d·%d·%d·%d = %d, but the job has %d devices", p.DP, p.TP, p.PP, p.CP, p.Devices(), j.Devices)
	case !splittable(m.Layers, p.PP, p.VPP):
		return broken(rejLayers, "pp·vpp = %d·%d chunks for layers=%d leaves a chunk other than the first and last without layers", p.PP, p.VPP, m.Layers)
	case !divides(j.GlobalBatch, p.DP, p.MBS):
		return broken(rejBatch, "dp·mbs = %d·%d does not divide the global batch %d", p.DP, p.MBS, j.GlobalBatch)
	}
	if r := j.expertRule(p); r.key != "" {
		return r
	}
	return j.stepRule(p)
}

// stepRule checks the rules of sp, the schedule and the precision, once
// the shape, vpp and mbs are known to be valid.
func (j Job) stepRule(p Plan) violation {
	switch {
	case p.SP && (j.Seq/p.CP)%p.TP != 0:
		return broken(rejSP, "sp=on needs tp=%d to divide the %d tokens per cp rank", p.TP, j.Seq/p.CP)
	case p.Schedule == Interleaved && j.MicroBatches(p)%p.PP != 0:
		return broken(rejInterleaved, "schedule=interleaved needs pp=%d to divide the %d micro-batches", p.PP, j.MicroBatches(p))
	case !(j.Cluster.Accel.Peak[p.Precision] > 0):
		return broken(rejPrecision, "precision=%s: %s has no %s peak", p.Precision, j.Cluster.Accel.Name, p.Precision)
	}
	return j.dualRule(p)
}

// shapeRule checks the rules that involve only tp, cp and pp.
func (j Job) shapeRule(tp, cp, pp int) violation {
	m := j.Model
	switch {
	case m.Heads%tp != 0:
		return broken(rejHeads, "tp=%d does not divide heads=%d", tp, m.Heads)
	case m.KVHeads%tp != 0:
		return broken(rejKVHeads, "tp=%d does not divide kv_heads=%d", tp, m.KVHeads)
	case m.FFN%tp != 0:
		return broken(rejFFN, "tp=%d does not divide ffn=%d", tp, m.FFN)
	case cp > 1 && j.Seq%(2*cp) != 0:
		return broken(rejSeq, "cp=%d needs seq=%d divisible by 2·cp (two causal-balanced chunks per rank)", cp, j.Seq)
	case !splittable(m.Layers, pp, 1):
		return broken(rejLayers, "pp=%d stages for layers=%d leaves a middle stage without layers", pp, m.Layers)
	}
	return violation{}
}

// splittable reports whether layers split over pp·vpp chunks (evenly, or
// unevenly with the lighter chunks at the ends; see partition) without a
// layerless chunk other than the first and the last.
func splittable(layers, pp, vpp int) bool {
	q, d := splitCounts(layers, pp*vpp)
	return q > 0 || d <= 2
}
