package plan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
)

// deepspeedVersion is the DeepSpeed release the mapping matches: the keys
// of its JSON configuration (https://www.deepspeed.ai/docs/config-json/;
// deepspeed/runtime/constants.py, deepspeed/runtime/zero/config.py and
// deepspeed/runtime/activation_checkpointing/config.py at tag v0.16.4,
// https://github.com/deepspeedai/DeepSpeed).
const deepspeedVersion = "DeepSpeed v0.16.4"

// deepspeedTable maps each JSON key the planner writes or reads to what it
// carries. Tensor, pipeline and context parallelism, the schedule, the
// rank order and the attention kernel are not in a DeepSpeed JSON: they
// are set by the model code (PipelineModule) or by Megatron-DeepSpeed's
// command line, and the planner takes them from --fix (deepspeedOutside).
func deepspeedTable() []fwArg {
	return []fwArg{
		{"train_batch_size", "global batch (= mbs · gradient_accumulation_steps · dp)"},
		{"train_micro_batch_size_per_gpu", "mbs"},
		{"gradient_accumulation_steps", "global batch / (dp · mbs)"},
		{"bf16.enabled", "precision=bf16"},
		{"fp16.enabled", "precision=fp16"},
		{"fp16.loss_scale", "0: dynamic loss scaling, as the engine's fp16 scales"},
		{"zero_optimization.stage", "zero"},
		{"zero_optimization.reduce_bucket_size", "the gradient bucket, elements (the planner costs 4e7)"},
		{"zero_optimization.allgather_bucket_size", "the parameter all-gather bucket, elements (4e7)"},
		{"zero_optimization.overlap_comm", "true: reductions overlap the backward, as the planner costs them"},
		{"zero_optimization.contiguous_gradients", "true"},
		{"zero_optimization.stage3_prefetch_bucket_size", "zero=3: one layer's parameters prefetched"},
		{"activation_checkpointing", "present: recompute=full (the model checkpoints every layer through deepspeed.checkpointing)"},
	}
}

// deepspeedOutside lists the plan keys a DeepSpeed JSON does not carry,
// with p's values, as the --fix that reads the JSON back needs them.
func deepspeedOutside(p Plan) []string {
	var out []string
	for _, k := range []string{"tp", "pp", "cp", "vpp", "sp", "schedule", "flash", "order"} {
		out = append(out, k+"="+p.Get(k))
	}
	return out
}

// deepspeedRules: fp8 (not in its JSON), selective recomputation (its
// checkpointing API recomputes whole layers), ZeRO-2/3 under a pipeline
// (its pipeline engine allows stage 0 or 1), and its pipeline schedule,
// which is 1F1B-like only (no interleaving, GPipe or zero bubble).
func deepspeedRules() []fwRule {
	const ds = "DeepSpeed"
	return []fwRule{
		scheduleRule(ds, OneFOneB),
		func(j Job, p Plan) ([]Plan, string) {
			if p.CP == 1 {
				return nil, ""
			}
			q := p
			q.DP, q.CP = p.DP*p.CP, 1
			return []Plan{q}, "DeepSpeed has no ring context parallelism (its Ulysses sequence parallelism is another scheme)"
		},
		keyRule(ds, "precision", "is not set by its JSON (bf16 is)", func(p Plan) bool { return p.Precision != FP8 }, "bf16"),
		keyRule(ds, "recompute", "is not offered: activation checkpointing recomputes whole layers", func(p Plan) bool { return p.Recompute != RecomputeSelective }, "none", "full"),
		keyRule(ds, "zero", "with pp>1: the pipeline engine allows ZeRO stage 0 or 1", func(p Plan) bool { return p.PP == 1 || p.ZeRO <= 1 }, "1", "0"),
		deepspeedExpertRule,
	}
}

// dsConfig is the JSON the planner writes and reads.
type dsConfig struct {
	TrainBatch int              `json:"train_batch_size"`
	MicroBatch int              `json:"train_micro_batch_size_per_gpu"`
	GradAccum  int              `json:"gradient_accumulation_steps"`
	BF16       *dsEnabled       `json:"bf16,omitempty"`
	FP16       *dsFP16          `json:"fp16,omitempty"`
	ZeRO       dsZeRO           `json:"zero_optimization"`
	AC         *json.RawMessage `json:"activation_checkpointing,omitempty"`
}

type dsEnabled struct {
	Enabled bool `json:"enabled"`
}

type dsFP16 struct {
	Enabled   bool    `json:"enabled"`
	LossScale float64 `json:"loss_scale"`
}

type dsZeRO struct {
	Stage           int   `json:"stage"`
	ReduceBucket    int64 `json:"reduce_bucket_size,omitempty"`
	AllgatherBucket int64 `json:"allgather_bucket_size,omitempty"`
	OverlapComm     bool  `json:"overlap_comm"`
	Contiguous      bool  `json:"contiguous_gradients"`
	Prefetch        int64 `json:"stage3_prefetch_bucket_size,omitempty"`
}

// deepspeedJSON writes p as a DeepSpeed configuration.
func (j Job) deepspeedJSON(p Plan) string {
	c := dsConfig{TrainBatch: j.GlobalBatch, MicroBatch: p.MBS, GradAccum: j.MicroBatches(p),
		ZeRO: dsZeRO{Stage: p.ZeRO, ReduceBucket: bucketParams, AllgatherBucket: bucketParams, OverlapComm: true, Contiguous: true}}
	switch p.Precision {
	case BF16:
		c.BF16 = &dsEnabled{true}
	case FP16:
		c.FP16 = &dsFP16{Enabled: true}
	}
	if p.ZeRO == 3 {
		c.ZeRO.Prefetch = int64(math.Ceil(j.shapeParams(p).layer))
	}
	if p.Recompute == RecomputeFull {
		ac := json.RawMessage(`{"partition_activations": false, "contiguous_memory_optimization": false, "cpu_checkpointing": false}`)
		c.AC = &ac
	}
	out, _ := json.MarshalIndent(c, "", "  ") // plain structs: cannot fail
	return string(out) + "\n"
}

// importDeepSpeed reads a DeepSpeed JSON; the keys it does not carry come
// from rest (default: tp=pp=cp=1, the rest as Default).
func (j Job) importDeepSpeed(text string, rest Fix) (Imported, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(text), &raw); err != nil {
		return Imported{}, fmt.Errorf("plan: deepspeed config: %w", err)
	}
	var c dsConfig
	dec := json.NewDecoder(bytes.NewReader([]byte(text)))
	if err := dec.Decode(&c); err != nil {
		return Imported{}, fmt.Errorf("plan: deepspeed config: %w", err)
	}
	var notes []string
	var other []string
	for k := range raw {
		if !strings.HasPrefix(k, "train_") && !contains([]string{"gradient_accumulation_steps", "bf16", "fp16", "zero_optimization", "activation_checkpointing"}, k) {
			other = append(other, k)
		}
	}
	if len(other) > 0 {
		sort.Strings(other)
		if err := deepspeedKeysExist(other); err != nil {
			return Imported{}, err
		}
		notes = append(notes, "not read (no effect on the plan's cost in the planner's model): "+strings.Join(printables(other), ", "))
	}
	p := Default()
	for _, k := range Keys() {
		if rest.Pinned(k) {
			_ = p.Set(k, rest.plan.Get(k)) // the value came from a valid plan
		}
	}
	n, ok := product(j.Devices, p.TP, p.PP, p.CP)
	if !ok || j.Devices%n != 0 {
		return Imported{}, fmt.Errorf("plan: deepspeed: tp·pp·cp = %d·%d·%d from --fix does not divide the %d devices", p.TP, p.PP, p.CP, j.Devices)
	}
	p.DP = j.Devices / n
	if rest.Pinned("dp") && rest.plan.DP != p.DP {
		return Imported{}, fmt.Errorf("plan: deepspeed: --fix dp=%d, but the devices over tp·pp·cp give dp=%d", rest.plan.DP, p.DP)
	}
	if p.ZeRO = c.ZeRO.Stage; p.ZeRO < 0 || p.ZeRO > 3 {
		return Imported{}, fmt.Errorf("plan: deepspeed: zero_optimization.stage %d: want 0, 1, 2 or 3", p.ZeRO)
	}
	p.Precision = FP32
	if c.BF16 != nil && c.BF16.Enabled {
		p.Precision = BF16
	} else if c.FP16 != nil && c.FP16.Enabled {
		p.Precision = FP16
	}
	p.Recompute = RecomputeNone
	if c.AC != nil {
		p.Recompute = RecomputeFull
	}
	im, err := dsBatch(c, &p)
	if err != nil {
		return Imported{}, err
	}
	for _, k := range []string{"zero", "mbs", "precision", "recompute"} {
		if rest.Pinned(k) && rest.plan.Get(k) != p.Get(k) {
			return Imported{}, fmt.Errorf("plan: --fix %s=%s: the deepspeed config says %s=%s", k, rest.plan.Get(k), k, p.Get(k))
		}
	}
	im.Plan = p
	im.Notes = sortedNotes(notes)
	return im, nil
}

// dsBatch reads the batch keys as DeepSpeed does (its config's
// _set_batch_related_parameters): any two determine the third by
// train_batch_size = micro · accumulation · dp, and one alone takes
// gradient_accumulation_steps = 1 (DeepSpeed's default). Every count is
// bounded, so that no product overflows.
func dsBatch(c dsConfig, p *Plan) (Imported, error) {
	dp := p.DP
	mbs, acc, gb := c.MicroBatch, c.GradAccum, c.TrainBatch
	for _, k := range []struct {
		key string
		v   int
	}{{"train_batch_size", gb}, {"train_micro_batch_size_per_gpu", mbs}, {"gradient_accumulation_steps", acc}} {
		if k.v < 0 || k.v > MaxDevices {
			return Imported{}, fmt.Errorf("plan: deepspeed: %s %d: want 0..%d (0 or absent: derived from the others)", k.key, k.v, MaxDevices)
		}
	}
	switch {
	case mbs > 0 && acc > 0 && gb == 0:
		gb = mul3(mbs, acc, dp)
	case mbs == 0 && acc > 0 && gb > 0 && gb%(acc*dp) == 0:
		mbs = gb / (acc * dp)
	case mbs > 0 && acc == 0 && gb > 0:
		acc = gb / (mbs * dp)
	case mbs == 0 && acc == 0 && gb > 0 && gb%dp == 0:
		mbs, acc = gb/dp, 1
	case mbs > 0 && acc == 0 && gb == 0:
		acc, gb = 1, mbs*dp
	}
	if mbs < 1 || acc < 1 || gb != mul3(mbs, acc, dp) {
		return Imported{}, fmt.Errorf("plan: deepspeed: train_batch_size %d ≠ train_micro_batch_size_per_gpu %d × gradient_accumulation_steps %d × dp %d (dp = devices / (tp·pp·cp) with tp=%d, pp=%d, cp=%d: give the job's tp, pp, cp with --fix)",
			c.TrainBatch, c.MicroBatch, c.GradAccum, dp, p.TP, p.PP, p.CP)
	}
	p.MBS = mbs
	return Imported{GlobalBatch: gb}, nil
}

// mul3 is a·b·c, or -1 when it overflows.
func mul3(a, b, c int) int {
	n, ok := product(math.MaxInt, a, b, c)
	if !ok {
		return -1
	}
	return n
}
