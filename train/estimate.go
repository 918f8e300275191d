package train

import (
	"fmt"

	"trellis/arch"
	"trellis/device"
	"trellis/internal/checked"
	"trellis/internal/sysmem"
	"trellis/launch"
	"trellis/model"
	"trellis/plan"
)

// layerBookkeeping is what one transformer block costs in Go-side
// metadata besides its numbers (the parameter layout's tensor names and
// shapes, dropout keys, bucket tables): about 2.7 KiB per block measured,
// rounded up.
const layerBookkeeping = 4 << 10

// memEstimate is one rank's memory from formulas alone, in float64 so that
// no configuration overflows it. It is a lower bound of what the rank
// allocates (communication buffers and bucket padding are left out): a
// job above a limit by this estimate cannot run, whatever the plan's
// details.
type memEstimate struct {
	params float64 // Ψ, the model's parameter count
	state  float64 // parameters, gradients and AdamW moments on this rank, bytes
	runner float64 // backward scratch, one micro-batch's activations and token buffers, bytes
	meta   float64 // per-block bookkeeping, bytes
}

// perRank is the whole estimate of one rank, in bytes.
func (m memEstimate) perRank() float64 { return m.state + m.runner + m.meta }

// stateBytes is one rank's training state for Ψ parameters under ZeRO
// stage z on N data-parallel ranks (parallel/zero's accounting without its
// padding): in fp32 the seed's 16 bytes per parameter, sharded,
//
//	z=0: 16Ψ   z=1: 4Ψ + 4Ψ + 8Ψ/N   z=2: 4Ψ + 12Ψ/N   z=3: 16Ψ/N
//
// and under a mixed policy (2-byte weights of fp32 masters sharded with
// the moments; stage 3's units rounded while fetched, not counted)
//
//	z=0: 2Ψ + 4Ψ + 12Ψ   z=1: 2Ψ + 4Ψ + 12Ψ/N   z=2: 2Ψ + 16Ψ/N   z=3: 16Ψ/N
func stateBytes(psi float64, zero, n int, mixed bool) float64 {
	N := float64(max(1, n))
	if mixed {
		switch zero {
		case 0:
			return 18 * psi
		case 1:
			return 6*psi + 12*psi/N
		case 2:
			return 2*psi + 16*psi/N
		}
		return 16 * psi / N
	}
	switch zero {
	case 1:
		return 8*psi + 8*psi/N
	case 2:
		return 4*psi + 12*psi/N
	case 3:
		return 16 * psi / N
	}
	return 16 * psi
}

// estimate is the memory of one rank of the job under plan p with
// kernels of the given thread count, from the engine's own formulas (the
// whole model's stash as arch declares it, the runner's scratch, the
// state) in float64, for any configuration: the model's whole stash and
// scratch, as a rank without tensor or pipeline parallelism holds them.
// Under context parallelism (cp = c) a rank holds T/c tokens of every
// sequence: its stash, scratch (the ring's, arch.Config.RingElems,
// instead of the materialising attention's) and token buffers are those
// of seq_len/c with the ring's attention (flash: no (T, T) term), and
// ZeRO shards the state over dp × cp. Under expert parallelism the state
// of its E/ep experts of every MoE block is sharded over the dp/ep ranks
// that hold them.
func estimate(m model.Config, microBatch int, p plan.Plan, threads int) memEstimate {
	psi := m.ParamCount()
	workers := max(1, min(threads, microBatch*max(1, m.KV())))
	half := p.Precision == plan.BF16 || p.Precision == plan.FP16
	cp := max(1, p.CP)
	T := m.SeqLen / cp
	d := arch.Dims{B: microBatch, T: T, Flash: p.Flash || cp > 1, Recompute: engineRecompute(p.Recompute), CP: cp}
	stash := m.StageStash(d, m.Layers, true, half).Bytes() + d.TokenBytes()
	state := stateBytes(psi, p.ZeRO, p.DP*cp, half)
	if ep, _ := p.Experts(); ep > 1 && m.Experts > 0 {
		// The routed experts' Ψ_e: a rank holds Ψ_e/ep, sharded over the
		// dp/ep ranks holding the same experts.
		e := float64(m.MoELayers(0, m.Layers)) * float64(m.Experts) * 3 * float64(m.Hidden) * float64(m.ExpertWidth())
		state = stateBytes(psi-e, p.ZeRO, p.DP*cp, half) + stateBytes(e/float64(ep), p.ZeRO, p.DP/ep, half)
	}
	return memEstimate{
		params: psi,
		state:  state,
		runner: m.Workspace(d, half, float64(workers)).Bytes() + stash + 8*float64(microBatch)*float64(T),
		meta:   layerBookkeeping * float64(m.Layers),
	}
}

// maxSampleLen bounds train.sample_len: the training loop's samples are
// held whole before they are printed.
const maxSampleLen = 1 << 20

// checkCounts rejects batch sizes whose products overflow before anything
// divides or allocates by them: dp × micro_batch (the samples of one
// micro-step), micro_batch × seq_len (a token buffer) and steps ×
// global_batch (the last sample index of the run); and a thread count
// beyond MaxThreads or a sample beyond maxSampleLen.
func (j Job) checkCounts(p plan.Plan) error {
	t := j.Train
	if t.Threads > MaxThreads {
		return fmt.Errorf("train.threads=%d must be at most %d (0: this process's CPUs / ranks)", t.Threads, MaxThreads)
	}
	if t.SampleLen > maxSampleLen {
		return fmt.Errorf("train.sample_len=%d must be at most %d (a sample printed in the log, kept in memory; trellis sample streams longer ones)", t.SampleLen, maxSampleLen)
	}
	for _, c := range []struct {
		what string
		xs   []int64
	}{
		{fmt.Sprintf("dp=%d × train.micro_batch=%d", p.DP, t.MicroBatch), []int64{int64(p.DP), int64(t.MicroBatch)}},
		{fmt.Sprintf("train.micro_batch=%d × model.seq_len=%d", t.MicroBatch, j.Model.SeqLen), []int64{int64(t.MicroBatch), int64(j.Model.SeqLen)}},
		{fmt.Sprintf("train.steps=%d × train.global_batch=%d", t.Steps, t.GlobalBatch), []int64{int64(t.Steps), int64(t.GlobalBatch)}},
	} {
		if _, ok := checked.Product(c.xs...); !ok {
			return fmt.Errorf("%s %v", c.what, checked.ErrOverflow)
		}
	}
	return nil
}

// inLaunchEnv reports whether this process is one rank of a launched
// world (torchrun, Slurm or Open MPI variables), where backend=auto means
// tcp: one rank per process.
func inLaunchEnv() bool {
	_, err := launch.WorkerEnv()
	return err == nil
}

// checkMemory refuses, before anything is allocated, a job whose
// estimated memory exceeds this machine's: every rank of the process (all
// of them on the local backend, one under tcp or auto, where each process
// is one rank), each rank's state and activations counted up to the device
// budget (the device refuses more, before allocating) plus its
// bookkeeping. physical is the machine's memory in bytes (0: unknown, no
// check). It also bounds parallel.bucket_size to the memory there is.
func (j Job) checkMemory(s settings, physical int64) error {
	e := estimate(j.Model, j.Train.MicroBatch, s.enginePlan, s.threads)
	// Whatever the machine: past 2^62 bytes some element count of the
	// runner or the state no longer fits an int (every buffer's length is
	// below its byte size), so nothing may be sized from it.
	if e.state+e.runner >= 1<<62 || e.meta >= 1<<62 {
		return fmt.Errorf("train: the job needs %s per rank (state %s for %.4g parameters + activations %s), more than any machine: shrink [model] or train.micro_batch",
			fmtEstimate(e.perRank()), fmtEstimate(e.state), e.params, fmtEstimate(e.runner))
	}
	if physical <= 0 {
		return nil
	}
	ranksHere := 1
	if b := j.Parallel.Backend; b == "" || b == "local" || (b == "auto" && !inLaunchEnv()) {
		ranksHere = s.ranks
	}
	// The device budget, when set, bounds what is allocated through the
	// device (state and runner) before anything is allocated: beyond it the
	// device refuses with its tagged out-of-memory error and the hint.
	tracked := e.state + e.runner
	if s.budget > 0 {
		tracked = min(tracked, float64(s.budget))
	}
	need := (tracked + e.meta) * float64(ranksHere)
	if need > float64(physical) {
		parts := fmt.Sprintf("state %s for %.4g parameters + activations %s", fmtEstimate(e.state), e.params, fmtEstimate(e.runner))
		if tracked < e.state+e.runner {
			parts = fmt.Sprintf("the device budget %s", device.FormatBytes(s.budget))
		}
		return fmt.Errorf("train: the job needs at least %s (%d rank(s) × (%s + bookkeeping %s for %d layers)), more than this machine's memory, %s: shrink [model] or train.micro_batch, or shard the state (zero=3, more devices)",
			fmtEstimate(need), ranksHere, parts, fmtEstimate(e.meta), j.Model.Layers, device.FormatBytes(physical))
	}
	if s.bucket > physical {
		return fmt.Errorf("parallel.bucket_size=%q is more than this machine's memory, %s", j.Parallel.BucketSize, device.FormatBytes(physical))
	}
	return nil
}

// fmtEstimate prints a float64 byte count, with "more than 8 EiB" past
// what an int64 holds.
func fmtEstimate(b float64) string {
	if !(b < 1<<63) {
		return "more than 8 EiB"
	}
	return device.FormatBytes(int64(b))
}

// physicalMemory is the machine's memory for checkMemory (0: unknown).
func physicalMemory() int64 {
	n, ok := sysmem.Physical()
	if !ok {
		return 0
	}
	return n
}
