package train

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"time"

	"trellis/checkpoint"
	"trellis/data"
	"trellis/device"
	"trellis/model"
	"trellis/plan"
	"trellis/precision"
)

// Config is the [train] section of a job file.
type Config struct {
	MicroBatch  int     `toml:"micro_batch"`  // B, sequences per rank per micro-step
	GlobalBatch int     `toml:"global_batch"` // sequences per optimizer step over all ranks
	Steps       int     `toml:"steps"`        // optimizer steps; fixes the LR schedule's length
	LR          float64 `toml:"lr"`           // peak learning rate
	MinLR       float64 `toml:"min_lr"`       // the cosine schedule's floor
	Warmup      int     `toml:"warmup"`       // linear warm-up steps
	Seed        uint64  `toml:"seed"`         // initial weights, data order, dropout
	EvalEvery   int     `toml:"eval_every"`   // validation every N steps (0: only at the end)
	EvalBatches int     `toml:"eval_batches"` // validation micro-batches per rank per evaluation
	GradClip    float64 `toml:"grad_clip"`    // max global gradient norm (0: off)
	Beta1       float64 `toml:"beta1"`
	Beta2       float64 `toml:"beta2"`
	Eps         float64 `toml:"eps"`
	WeightDecay float64 `toml:"weight_decay"` // decoupled, on matrices and embeddings only
	Threads     int     `toml:"threads"`      // kernel threads per rank (0: this process's CPUs / ranks)
	SampleEvery int     `toml:"sample_every"` // print a generated sample every N steps (0: only at the end; <0: never)
	SampleLen   int     `toml:"sample_len"`   // tokens per printed sample
	Prompt      string  `toml:"prompt"`       // the printed samples' prompt
	LogEvery    int     `toml:"log_every"`    // log a line every N steps when not on a terminal
	// LossScale is fp16's initial dynamic loss scale (0: 65536) and
	// LossScaleWindow the clean steps after which it doubles (0: 1000).
	LossScale       float64 `toml:"loss_scale"`
	LossScaleWindow int     `toml:"loss_scale_window"`
	// FP8Recipe is precision=fp8's scaling of the linear layers' GEMM
	// operands: "delayed" (per tensor, from an amax history: the default)
	// or "blockwise" (DeepSeek-V3's 1×128 and 128×128 tiles).
	// FP8History is delayed scaling's history in steps (0: 16), FP8Margin
	// its margin (the scale divided by 2^margin), FP8Tile the blockwise
	// tile edge (0: 128).
	FP8Recipe  string `toml:"fp8_recipe"`
	FP8History int    `toml:"fp8_history"`
	FP8Margin  int    `toml:"fp8_margin"`
	FP8Tile    int    `toml:"fp8_tile"`
}

// ParallelConfig is the [parallel] section: how the step is split.
type ParallelConfig struct {
	// Plan is the canonical plan text shared with `trellis plan`, e.g.
	// "dp=4,zero=3". Keys left out take the engine's defaults (one device,
	// fp32, no flash attention), not the planner's.
	Plan string `toml:"plan"`
	// Devices is the number of ranks; 0 means the plan's device count.
	Devices int `toml:"devices"`
	// DeviceMemory is every rank's memory budget, e.g. "512MiB" ("" or "0": none).
	DeviceMemory string `toml:"device_memory"`
	// Backend is "auto" (the default: tcp when a launch environment is
	// present, else local), "local" (ranks are goroutines) or "tcp" (one
	// process per rank, started by `trellis launch` or a scheduler) or
	// "mpi" (one process per rank under mpirun or srun; a binary built with
	// -tags mpi, see comm/mpi).
	Backend string `toml:"backend"`
	// BucketSize is the gradient bucket of data parallelism and ZeRO, e.g. "4MiB".
	BucketSize string `toml:"bucket_size"`
	// Overlap launches each bucket's reduction as soon as it is ready, behind
	// the rest of the backward pass; false reduces after the backward pass.
	Overlap bool `toml:"overlap"`
	// Prefetch, under ZeRO-3, gathers the next unit's parameters while the
	// current one computes.
	Prefetch bool `toml:"prefetch"`
	// Timeout bounds every collective; a peer silent this long is reported dead.
	Timeout string `toml:"timeout"`
	// LinkBandwidth and LinkLatency emulate a slower interconnect on the local
	// backend (e.g. "1GB" per second and "50us"); empty means none.
	LinkBandwidth string `toml:"link_bandwidth"`
	LinkLatency   string `toml:"link_latency"`
	// Cluster is a planner cluster file describing this machine (written
	// by `trellis profile -o`), which the run's predictions use; empty:
	// a built-in estimate.
	Cluster string `toml:"cluster"`
}

// Job is a whole job file.
type Job struct {
	Model      model.Config      `toml:"model"`
	Parallel   ParallelConfig    `toml:"parallel"`
	Train      Config            `toml:"train"`
	Data       data.Config       `toml:"data"`
	Checkpoint checkpoint.Config `toml:"checkpoint"`
}

// DefaultJob is what `trellis train` runs with no flags: a small GPT on the
// embedded novel, byte-level, sized to show English-like samples within
// minutes on two CPU cores — and the seed's demonstration: its training
// state (16 bytes per parameter, 49.7 MiB) does not fit the 48 MiB budget of
// one device, so it trains with ZeRO-3 on 4 local devices (about 47 MiB
// each at most). `--parallel dp=1` shows the single device failing before
// the first step. The micro-batch of 2 keeps activations small so that
// the state dominates the budget.
func DefaultJob() Job {
	return Job{
		Model: model.Config{Layers: 4, Hidden: 256, Heads: 4, SeqLen: 128, Vocab: 256},
		Parallel: ParallelConfig{
			Plan:         "dp=4,zero=3",
			DeviceMemory: "48MiB",
			Backend:      "auto",
			BucketSize:   "1MiB",
			Overlap:      true,
			Prefetch:     true,
			Timeout:      "60s",
		},
		Train: Config{
			MicroBatch: 2, GlobalBatch: 16, Steps: 600, LR: 2e-3, MinLR: 2e-4, Warmup: 40, Seed: 1337,
			EvalEvery: 100, EvalBatches: 8, GradClip: 1.0, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8,
			WeightDecay: 0.1, SampleEvery: 200, SampleLen: 200, Prompt: "It is a truth universally acknowledged", LogEvery: 10,
		},
		Data:       data.DefaultConfig(),
		Checkpoint: checkpoint.Config{Dir: "runs/trellis", Keep: 2},
	}
}

// EnginePlan parses the plan text on top of the engine's defaults: fp32, no
// flash attention, micro-batch from [train], one device per axis. A plan's
// mbs, when given, is the micro-batch (see Normalized). The parser is the
// planner's (plan.ParseOnto), with its rules on unknown and repeated keys.
func (j Job) EnginePlan() (plan.Plan, error) {
	base := plan.Default()
	base.Precision = plan.FP32
	base.Flash = false
	base.MBS = j.Train.MicroBatch
	p, err := plan.ParseOnto(base, j.Parallel.Plan)
	if err != nil {
		return p, fmt.Errorf("parallel.plan=%q: %w", j.Parallel.Plan, err)
	}
	if err := p.Validate(); err != nil {
		return p, fmt.Errorf("parallel.plan: %w", err)
	}
	return p, nil
}

// checkSupported rejects what the engine does not run, from its one
// table (plan.EngineRefusals, which the planner consults too): one line
// naming the keys and the rule.
func checkSupported(m model.Config, p plan.Plan) error {
	if bad := plan.EngineRefusals(planModel(m), p); len(bad) > 0 {
		return fmt.Errorf("parallel.plan: %s", strings.Join(bad, "; "))
	}
	return nil
}

// Validate names the first field that breaks a rule.
func (c Config) Validate() error {
	switch {
	case c.MicroBatch < 1:
		return fmt.Errorf("train.micro_batch=%d must be >= 1", c.MicroBatch)
	case c.GlobalBatch < 1:
		return fmt.Errorf("train.global_batch=%d must be >= 1", c.GlobalBatch)
	case c.Steps < 1:
		return fmt.Errorf("train.steps=%d must be >= 1", c.Steps)
	case !(c.LR > 0) || math.IsInf(c.LR, 0):
		return fmt.Errorf("train.lr=%g must be a finite number > 0", c.LR)
	case !(c.MinLR >= 0 && c.MinLR <= c.LR):
		return fmt.Errorf("train.min_lr=%g must be in [0, train.lr=%g]", c.MinLR, c.LR)
	case c.Warmup < 0:
		return fmt.Errorf("train.warmup=%d must be >= 0 (more than train.steps warms up over the whole run)", c.Warmup)
	case c.EvalEvery < 0:
		return fmt.Errorf("train.eval_every=%d must be >= 0", c.EvalEvery)
	case c.EvalBatches < 0:
		return fmt.Errorf("train.eval_batches=%d must be >= 0", c.EvalBatches)
	case !(c.GradClip >= 0) || math.IsInf(c.GradClip, 0):
		return fmt.Errorf("train.grad_clip=%g must be a finite number >= 0 (0: off)", c.GradClip)
	case c.Threads < 0:
		return fmt.Errorf("train.threads=%d must be >= 0", c.Threads)
	case c.SampleLen < 0:
		return fmt.Errorf("train.sample_len=%d must be >= 0", c.SampleLen)
	case c.LogEvery < 0:
		return fmt.Errorf("train.log_every=%d must be >= 0", c.LogEvery)
	case c.LossScale != 0 && !(c.LossScale >= 1 && c.LossScale <= maxLossScale):
		return fmt.Errorf("train.loss_scale=%g must be in [1, 2^40] (0: 65536): beyond 2^40 every gradient fp16 can hold (from 2^-24) overflows its 65504, so steps are only skipped while the scale halves", c.LossScale)
	case c.LossScaleWindow < 0:
		return fmt.Errorf("train.loss_scale_window=%d must be >= 0 (0: 1000)", c.LossScaleWindow)
	case c.FP8Recipe != "" && c.FP8Recipe != "delayed" && c.FP8Recipe != "blockwise":
		return fmt.Errorf("train.fp8_recipe=%q must be delayed or blockwise", c.FP8Recipe)
	case c.FP8History < 0 || c.FP8History > 1<<16:
		return fmt.Errorf("train.fp8_history=%d must be in [0, 65536] (0: 16)", c.FP8History)
	case c.FP8Margin < 0 || c.FP8Margin > 30:
		return fmt.Errorf("train.fp8_margin=%d must be in [0, 30]", c.FP8Margin)
	case c.FP8Tile < 0:
		return fmt.Errorf("train.fp8_tile=%d must be >= 0 (0: 128)", c.FP8Tile)
	}
	return nil
}

// maxLossScale bounds fp16's initial loss scale: a gradient survives when
// g·S lies in fp16's [2^-24, 65504 ≈ 2^16], so a scale above 2^40 overflows
// every gradient that fp16 could hold at all.
const maxLossScale = 1 << 40

// settings are the parsed forms of ParallelConfig's strings.
type settings struct {
	budget     int64
	bucket     int64
	timeout    time.Duration
	linkBW     float64 // bytes/s, 0: none
	linkLat    time.Duration
	ranks      int
	threads    int
	accum      int     // micro-steps per optimizer step
	peak       float64 // FLOP/s of the cores the ranks use (MFU's denominator): runPeak, stated, never measured
	peakSrc    string  // where peak comes from, for the log
	enginePlan plan.Plan
	policy     precision.Policy // the plan's precision
	runID      string           // the run's identity (claimDir), recorded in its checkpoints
	init       []float32        // [model] init's global weights (loadInit); nil: random
	warmup     int              // train.warmup clamped to train.steps
	processes  bool             // the ranks are processes (a launcher's world), not goroutines of one
}

// resolve validates the job and derives everything the ranks need.
func (j Job) resolve() (settings, error) {
	var s settings
	if err := j.Model.Validate(); err != nil {
		return s, err
	}
	if err := j.Train.Validate(); err != nil {
		return s, err
	}
	if err := j.Data.Validate(); err != nil {
		return s, err
	}
	if err := j.checkVocab(); err != nil {
		return s, err
	}
	if err := j.checkInit(); err != nil {
		return s, err
	}
	if err := j.Checkpoint.Validate(); err != nil {
		return s, err
	}
	p, err := j.EnginePlan()
	if err != nil {
		return s, err
	}
	if err := checkSupported(j.Model, p); err != nil {
		return s, err
	}
	if err := checkTP(j, p); err != nil {
		return s, err
	}
	if err := checkCP(j, p); err != nil {
		return s, err
	}
	s.enginePlan = p
	s.policy = policy(p.Precision, j.Train)
	s.ranks = p.Devices()
	if d := j.Parallel.Devices; d != 0 && p.PP > d {
		return s, fmt.Errorf("parallel.plan: pp=%d is larger than parallel.devices=%d", p.PP, d)
	}
	if j.Parallel.Devices != 0 && j.Parallel.Devices != s.ranks {
		return s, fmt.Errorf("parallel.devices=%d does not match the plan %q, which needs %d", j.Parallel.Devices, p.Short(), s.ranks)
	}
	if err := j.checkCounts(p); err != nil {
		return s, err
	}
	per := p.DP * j.Train.MicroBatch
	if j.Train.GlobalBatch%per != 0 {
		return s, fmt.Errorf("train.global_batch=%d is not a multiple of dp=%d × train.micro_batch=%d", j.Train.GlobalBatch, p.DP, j.Train.MicroBatch)
	}
	s.accum = j.Train.GlobalBatch / per
	if err := checkPipeline(j, p, s.accum); err != nil {
		return s, err
	}
	if p.EPOverlap && s.accum < 2 {
		return s, fmt.Errorf("parallel.plan: ep_overlap=on pairs each micro-batch's forward with the backward of the one before, but a step has 1 (train.global_batch / (dp × train.micro_batch) = %d / (%d × %d)): nothing to pair", j.Train.GlobalBatch, p.DP, j.Train.MicroBatch)
	}
	s.warmup = min(j.Train.Warmup, j.Train.Steps)
	if s.budget, err = parseSize("parallel.device_memory", j.Parallel.DeviceMemory); err != nil {
		return s, err
	}
	if s.bucket, err = parseSize("parallel.bucket_size", j.Parallel.BucketSize); err != nil {
		return s, err
	}
	if s.timeout, err = parseDuration("parallel.timeout", j.Parallel.Timeout, 60*time.Second); err != nil {
		return s, err
	}
	if s.linkLat, err = parseDuration("parallel.link_latency", j.Parallel.LinkLatency, 0); err != nil {
		return s, err
	}
	bw, err := parseSize("parallel.link_bandwidth", j.Parallel.LinkBandwidth)
	if err != nil {
		return s, err
	}
	s.linkBW = float64(bw)
	switch j.Parallel.Backend { // comm/world's backends (cmd/trellis TestBackendsInStep)
	case "", "local", "tcp", "auto", "mpi", "shm":
	default:
		return s, fmt.Errorf("parallel.backend=%q must be local, tcp, shm, mpi or auto", j.Parallel.Backend)
	}
	s.threads = j.Train.Threads
	if s.threads == 0 {
		s.threads = max(1, runtime.GOMAXPROCS(0)/s.ranks)
	}
	if err := j.checkMemory(s, physicalMemory()); err != nil {
		return s, err
	}
	return s, nil
}

func parseSize(field, v string) (int64, error) {
	if v == "" || v == "0" {
		return 0, nil
	}
	n, err := device.ParseBytes(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", field, err)
	}
	return n, nil
}

func parseDuration(field, v string, def time.Duration) (time.Duration, error) {
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s=%q: want a duration such as 30s or 50us", field, v)
	}
	return d, nil
}
