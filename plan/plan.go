// Package plan is Trellis's planner: a cost model of per-device memory and
// step time for training a decoder-only transformer under a parallel plan,
// and a search over plans for a cluster. It is pure: no I/O, no goroutines,
// and it imports no other Trellis package, so the engine can share its Plan
// type without pulling the planner's dependencies (and vice versa).
//
// The objective it implements is the seed's
//
//	min over plans  T_step = T_compute + T_comm,exposed + T_bubble + T_misc
//	subject to      M_param + M_grad + M_optim + M_act + M_other ≤ M_budget
//
// docs/PLANNER.md derives every term and holds the predictions against
// published figures.
package plan

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Schedule is a pipeline schedule.
type Schedule string

// The pipeline schedules.
const (
	GPipe       Schedule = "gpipe"       // all forwards, then all backwards (Huang et al. 2018)
	OneFOneB    Schedule = "1f1b"        // one forward, one backward (PipeDream-Flush)
	Interleaved Schedule = "interleaved" // 1F1B over vpp model chunks per rank (Narayanan et al. 2021)
	// ZBH1 is zero-bubble H1 (Qi et al. 2023): 1F1B with each backward
	// split into B (input gradient) and W (weight gradient), the W passes
	// deferred into the cool-down bubble; 1F1B's activation memory, a
	// bubble of (p−1)(F+B−2W) for 1F1B's (p−1)(F+B), B the whole backward.
	ZBH1 Schedule = "zb-h1"
	// DualPipe is DeepSeek-V3's bidirectional schedule (DeepSeek-AI 2024,
	// §3.2.1): micro-batches enter from both ends, rank r holds stages r and
	// pp−1−r (two copies of the parameters), forward and backward chunks of
	// different micro-batches overlap each other's communication; bubble
	// (pp/2−1)(F&B+B−3W), pp+1 chunks of activations. DualPipeV is its
	// "cut-in-half" V-shaped form (Sea AI Lab; deepseek-ai/DualPipe): 2·pp
	// chunks, rank r holding chunks r and 2pp−1−r, one copy. dualpipe.go.
	DualPipe  Schedule = "dualpipe"
	DualPipeV Schedule = "dualpipev"
)

// Schedules lists the pipeline schedules, in the order the text form
// names them.
func Schedules() []Schedule {
	return []Schedule{GPipe, OneFOneB, Interleaved, ZBH1, DualPipe, DualPipeV}
}

// dual reports DualPipe and DualPipeV.
func (s Schedule) dual() bool { return s == DualPipe || s == DualPipeV }

// Recompute is an activation recomputation policy.
type Recompute string

// The recomputation policies.
const (
	RecomputeNone      Recompute = "none"      // keep every activation
	RecomputeSelective Recompute = "selective" // recompute the attention core (Korthikanti et al. 2022)
	RecomputeFull      Recompute = "full"      // keep each layer's input, recompute the layer
)

// Precision is the training precision. Every precision other than fp32 keeps
// fp32 master weights and fp32 Adam moments (mixed precision).
type Precision string

// The precisions.
const (
	FP32 Precision = "fp32"
	BF16 Precision = "bf16"
	FP16 Precision = "fp16" // with dynamic loss scaling
	FP8  Precision = "fp8"  // fp8 GEMMs, bf16 weights and activations elsewhere
)

// DefaultOrder is the rank order used when none is given: tp varies fastest,
// so TP groups are consecutive ranks inside a node (as in package mesh).
const DefaultOrder = "tp-cp-dp-pp"

// Plan is one way to split a training step over devices. Its text form is
// shared by `trellis plan` and `trellis train --parallel`:
//
//	dp=8,tp=8,pp=4,cp=1,vpp=2,zero=1,sp=on,mbs=1,schedule=interleaved,recompute=selective,precision=bf16,flash=on,order=tp-cp-dp-pp
//
// Devices() = DP·TP·PP·CP.
type Plan struct {
	DP  int // data-parallel replicas
	TP  int // tensor-parallel ranks (Megatron column/row split)
	PP  int // pipeline stages
	CP  int // context-parallel ranks (sequence split inside attention)
	VPP int // virtual stages (model chunks) per pipeline rank; >1 only with Interleaved

	ZeRO      int       // 0: replicated; 1: optimizer states sharded; 2: + gradients; 3: + parameters
	SP        bool      // sequence parallelism in the non-tensor-parallel regions (needs TP>1)
	MBS       int       // micro-batch size in sequences
	Schedule  Schedule  // pipeline schedule
	Recompute Recompute // activation recomputation
	Precision Precision // training precision
	Flash     bool      // IO-aware (FlashAttention-style) attention: no s×s score matrix in memory
	Order     string    // axes fastest-varying first, e.g. "tp-cp-dp-pp"

	// EP and ETP are the expert-parallel and expert-tensor-parallel degrees
	// of a model with routed experts: Megatron-Core's parallel folding lays
	// the MoE layers' ETP × EP × EDP × PP mesh over the ranks of the
	// attention layers' TP × CP × DP × PP (expert.go). A degree of 1 is
	// stored as 0, so every plan written before experts is unchanged, in
	// memory and in text (which names ep and etp only when either is > 1);
	// read them with Plan.Experts.
	EP, ETP int

	// EPOverlap (ep_overlap=on) runs a one-stage 1F1B step's forward of
	// micro-batch i+1 beside the backward of micro-batch i, each pass's
	// expert all-to-alls hidden behind the other's compute (Megatron-Core's
	// EP-overlapped 1F1B; train's pair of runners, parallel/pp's paired
	// actions). An execution option of the engine, not a search key: Keys
	// omits it, String and Short name it only when on, so every other
	// plan's text is unchanged; EngineRefusals says where it runs.
	EPOverlap bool
}

// Experts returns the expert-parallel and expert-tensor-parallel degrees
// (1 for the stored 0).
func (p Plan) Experts() (ep, etp int) { return max(1, p.EP), max(1, p.ETP) }

// SetExperts sets ep and etp, stored in Plan's form (1 as 0).
func (p *Plan) SetExperts(ep, etp int) { p.EP, p.ETP = storedDegree(ep), storedDegree(etp) }

func storedDegree(n int) int {
	if n == 1 {
		return 0
	}
	return n
}

// Default is the plan that every key of the text form falls back to:
// one device, no sharding, micro-batch 1, 1F1B, no recomputation, bf16,
// flash attention on (the IO-aware kernel is both faster and smaller than
// materialising the score matrix, so it is the sensible default), and
// tp-fastest rank order.
func Default() Plan {
	return Plan{DP: 1, TP: 1, PP: 1, CP: 1, VPP: 1, ZeRO: 0, SP: false, MBS: 1,
		Schedule: OneFOneB, Recompute: RecomputeNone, Precision: BF16, Flash: true, Order: DefaultOrder}
}

// Devices is the number of devices the plan occupies: DP·TP·PP·CP.
func (p Plan) Devices() int { return p.DP * p.TP * p.PP * p.CP }

// Keys lists the keys of the text form in canonical order: the thirteen
// of every plan, then the expert keys ep and etp.
func Keys() []string {
	return []string{"dp", "tp", "pp", "cp", "vpp", "zero", "sp", "mbs", "schedule", "recompute", "precision", "flash", "order", "ep", "etp"}
}

// textKeys are the keys String writes: all of Keys, less ep and etp when
// both are 1 (so a dense plan's text is what it was before experts).
func (p Plan) textKeys() []string {
	ks := Keys()
	if ep, etp := p.Experts(); ep == 1 && etp == 1 {
		ks = ks[:len(ks)-2]
	}
	if p.EPOverlap {
		ks = append(ks, "ep_overlap")
	}
	return ks
}

// String is the canonical text form: every key, in Keys order (ep and etp
// only when not both 1). Parse inverts it exactly.
func (p Plan) String() string {
	var b strings.Builder
	for i, k := range p.textKeys() {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(p.Get(k))
	}
	return b.String()
}

// Short is the text form without the keys whose value is the default.
func (p Plan) Short() string {
	d := Default()
	var parts []string
	for _, k := range Keys() {
		if v := p.Get(k); v != d.Get(k) || k == "dp" || k == "tp" || k == "pp" {
			parts = append(parts, k+"="+v)
		}
	}
	if p.EPOverlap {
		parts = append(parts, "ep_overlap=on")
	}
	return strings.Join(parts, ",")
}

// Get returns the text of one key's value ("" for an unknown key).
func (p Plan) Get(key string) string {
	switch key {
	case "dp":
		return strconv.Itoa(p.DP)
	case "tp":
		return strconv.Itoa(p.TP)
	case "pp":
		return strconv.Itoa(p.PP)
	case "cp":
		return strconv.Itoa(p.CP)
	case "vpp":
		return strconv.Itoa(p.VPP)
	case "zero":
		return strconv.Itoa(p.ZeRO)
	case "sp":
		return onOff(p.SP)
	case "mbs":
		return strconv.Itoa(p.MBS)
	case "schedule":
		return string(p.Schedule)
	case "recompute":
		return string(p.Recompute)
	case "precision":
		return string(p.Precision)
	case "flash":
		return onOff(p.Flash)
	case "order":
		return p.Order
	case "ep":
		return strconv.Itoa(max(1, p.EP))
	case "etp":
		return strconv.Itoa(max(1, p.ETP))
	case "ep_overlap":
		return onOff(p.EPOverlap)
	}
	return ""
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// Parse reads the text form: comma-separated key=value pairs, any subset of
// Keys in any order; a missing key takes its value from Default. Unknown
// keys, repeated keys and bad values are errors that name them. The empty
// string is the default plan. Parse checks the syntax of each value, not the
// rules between keys: call Validate for those.
func Parse(s string) (Plan, error) {
	p := Default()
	_, err := parseInto(&p, s)
	return p, err
}

// parseInto sets the keys named in s on p and returns which were set.
func parseInto(p *Plan, s string) (map[string]bool, error) {
	seen := map[string]bool{}
	s = strings.TrimSpace(s)
	if s == "" {
		return seen, nil
	}
	for _, item := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(item, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok {
			return seen, fmt.Errorf("plan: %q is not key=value", strings.TrimSpace(item))
		}
		if seen[k] {
			return seen, fmt.Errorf("plan: key %q given twice", k)
		}
		if err := p.Set(k, v); err != nil {
			return seen, err
		}
		seen[k] = true
	}
	return seen, nil
}

// Set assigns one key from its text value.
func (p *Plan) Set(key, val string) error {
	switch key {
	case "dp", "tp", "pp", "cp", "vpp", "zero", "mbs", "ep", "etp":
		n, err := strconv.Atoi(val)
		if err != nil {
			return fmt.Errorf("plan: %s=%q is not an integer", key, val)
		}
		if err := checkBound(key, n); err != nil {
			return err
		}
		if key == "ep" || key == "etp" {
			if n < 1 {
				return fmt.Errorf("plan: %s=%d: must be at least 1", key, n)
			}
			n = storedDegree(n)
		}
		*p.intField(key) = n
	case "sp", "flash", "ep_overlap":
		b, err := parseOnOff(key, val)
		if err != nil {
			return err
		}
		switch key {
		case "sp":
			p.SP = b
		case "flash":
			p.Flash = b
		default:
			p.EPOverlap = b
		}
	case "schedule":
		return setEnum(&p.Schedule, key, val, Schedules()...)
	case "recompute":
		return setEnum(&p.Recompute, key, val, RecomputeNone, RecomputeSelective, RecomputeFull)
	case "precision":
		return setEnum(&p.Precision, key, val, FP32, BF16, FP16, FP8)
	case "order":
		if err := checkOrder(val); err != nil {
			return err
		}
		p.Order = val
	default:
		return fmt.Errorf("plan: unknown key %q (known: %s, ep_overlap)", key, strings.Join(Keys(), ", "))
	}
	return nil
}

func (p *Plan) intField(key string) *int {
	switch key {
	case "dp":
		return &p.DP
	case "tp":
		return &p.TP
	case "pp":
		return &p.PP
	case "cp":
		return &p.CP
	case "vpp":
		return &p.VPP
	case "zero":
		return &p.ZeRO
	case "ep":
		return &p.EP
	case "etp":
		return &p.ETP
	}
	return &p.MBS
}

func parseOnOff(key, val string) (bool, error) {
	switch val {
	case "on", "true":
		return true, nil
	case "off", "false":
		return false, nil
	}
	return false, fmt.Errorf("plan: %s=%q: want on or off", key, val)
}

func setEnum[T ~string](dst *T, key, val string, allowed ...T) error {
	names := make([]string, len(allowed))
	for i, a := range allowed {
		if string(a) == val {
			*dst = a
			return nil
		}
		names[i] = string(a)
	}
	return fmt.Errorf("plan: %s=%q: want one of %s", key, val, strings.Join(names, ", "))
}

// Bounds on a plan's numbers, checked as they are parsed (Set) and by
// Validate, so that no product of them overflows: a degree or micro-batch
// is at most MaxDevices (a job's devices and global batch are bounded so,
// Job.Validate), and vpp at most MaxVPP model chunks per stage (each needs
// a layer of its own; the largest presets have 128 layers). Validate
// leaves mbs to the caller's own rule (the engine names train.micro_batch)
// and to Job.Check, whose dp·mbs must divide the global batch.
const (
	MaxDevices = 1 << 24
	MaxVPP     = 1 << 10
)

// checkBound refuses an integer key's value above its bound.
func checkBound(key string, n int) error {
	switch {
	case key == "vpp" && n > MaxVPP:
		return fmt.Errorf("plan: vpp=%d: at most %d model chunks per pipeline stage (each needs its own layers)", n, MaxVPP)
	case key != "zero" && n > MaxDevices:
		return fmt.Errorf("plan: %s=%d: at most %d (the most devices, and sequences per step, a job may have)", key, n, MaxDevices)
	}
	return nil
}

// ErrInvalid is matched (errors.Is) by every error Validate returns.
var ErrInvalid = errors.New("invalid plan")

func invalid(format string, args ...any) error {
	return &invalidError{format: format, args: args}
}

// invalidError is a broken rule, formatted only when printed (the search's
// count test checks millions of invalid plans): "plan: <rule>: invalid
// plan", matching ErrInvalid.
type invalidError struct {
	format string
	args   []any
}

func (e *invalidError) Error() string {
	return "plan: " + fmt.Sprintf(e.format, e.args...) + ": " + ErrInvalid.Error()
}

func (e *invalidError) Unwrap() error { return ErrInvalid }

// Validate checks the rules between keys that hold for any model. Rules that
// involve the model, sequence or batch are in Job.Check.
func (p Plan) Validate() error {
	for _, k := range []string{"dp", "tp", "pp", "cp", "vpp", "mbs"} {
		if v := *p.intField(k); v < 1 {
			return invalid("%s=%d: must be at least 1", k, v)
		}
		if err := checkBound(k, *p.intField(k)); err != nil && k != "mbs" { // mbs: Job.Check's batch rule
			return fmt.Errorf("%w: %w", err, ErrInvalid)
		}
	}
	if _, ok := product(MaxDevices, p.DP, p.TP, p.PP, p.CP); !ok {
		return invalid("dp·tp·pp·cp = %d·%d·%d·%d: more than %d devices", p.DP, p.TP, p.PP, p.CP, MaxDevices)
	}
	if p.EP < 0 || p.ETP < 0 {
		return invalid("ep=%d, etp=%d: must be at least 1", p.EP, p.ETP)
	}
	if p.ZeRO < 0 || p.ZeRO > 3 {
		return invalid("zero=%d: must be 0, 1, 2 or 3", p.ZeRO)
	}
	if err := p.validEnums(); err != nil {
		return fmt.Errorf("%w: %w", err, ErrInvalid)
	}
	switch {
	case p.SP && p.TP == 1:
		return invalid("sp=on needs tp>1 (sequence parallelism splits the regions tensor parallelism replicates)")
	case p.Schedule == Interleaved && p.PP == 1:
		return invalid("schedule=interleaved needs pp>1")
	case p.Schedule == Interleaved && p.VPP < 2:
		return invalid("schedule=interleaved needs vpp>=2 (with vpp=1 it is 1f1b)")
	case p.VPP > 1 && p.Schedule != Interleaved:
		return invalid("vpp=%d needs schedule=interleaved", p.VPP)
	case p.Schedule.dual() && p.PP == 1:
		return invalid("schedule=%s needs pp>1", p.Schedule)
	case p.Schedule == DualPipe && p.PP%2 != 0:
		return invalid("schedule=dualpipe needs an even pp (got pp=%d): rank r pairs with rank pp−1−r", p.PP)
	}
	return nil
}

// validEnums checks the enumerated keys without allocating on the valid
// path (the search's count test checks millions of plans); an invalid
// value gets Set's error.
func (p Plan) validEnums() error {
	var q Plan
	switch {
	case p.Schedule != GPipe && p.Schedule != OneFOneB && p.Schedule != Interleaved && p.Schedule != ZBH1 && !p.Schedule.dual():
		return q.Set("schedule", string(p.Schedule))
	case p.Recompute != RecomputeNone && p.Recompute != RecomputeSelective && p.Recompute != RecomputeFull:
		return q.Set("recompute", string(p.Recompute))
	case p.Precision != FP32 && p.Precision != BF16 && p.Precision != FP16 && p.Precision != FP8:
		return q.Set("precision", string(p.Precision))
	case p.Order != DefaultOrder && !orderOK(p.Order):
		return q.Set("order", p.Order)
	}
	return nil
}

// MarshalText writes the canonical text form, so a Plan is a string in
// TOML and JSON configuration.
func (p Plan) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText parses the text form (missing keys take their defaults).
func (p *Plan) UnmarshalText(b []byte) error {
	q, err := Parse(string(b))
	if err != nil {
		return err
	}
	*p = q
	return nil
}
