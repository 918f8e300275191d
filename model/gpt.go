package model

import (
	"errors"
	"fmt"
	"runtime"

	"trellis/device"
	"trellis/ops"
	"trellis/rng"
	"trellis/tensor"
)

// Options is everything New needs.
type Options struct {
	Model      Config
	Kernels    *ops.Kernels
	Device     *device.Device // where stashes (act) and backward scratch (workspace) are charged
	MicroBatch int            // B, sequences per micro-batch
	Seed       uint64         // keys the dropout masks
	// Part is the piece of every layer this rank computes under tensor
	// (and sequence) parallelism; the zero value is the whole model.
	Part Part
	// TP is the tensor-parallel group's communication (nil: one rank).
	TP TPComm
	// Flash runs IO-aware attention (ops.FlashAttentionForward/Backward):
	// the stash keeps (B,NH,T) log-sum-exps instead of the (B,NH,T,T)
	// probabilities and the backward needs no (T,T) scratch.
	Flash bool
	// Recompute drops activations from the stash that the backward
	// recomputes (see Recompute).
	Recompute Recompute
	// Compute is the linear layers' GEMM precision: tensor.F32 (the zero
	// value), tensor.BF16 or tensor.F16 (mixed precision, see half.go).
	Compute tensor.DType
	// HalfPerUnit keeps the bf16 copy of a unit only while its weights
	// are fetched (ZeRO-3, which gathers them per unit); otherwise it is
	// resident.
	HalfPerUnit bool
	// Units are the units whose weights this runner fetches (a pipeline
	// stage's, model.Layout indices); nil: every unit. Under mixed
	// precision only they have a resident 16-bit copy.
	Units []int
	// Unpinned leaves the passes free to move between OS threads (see
	// pin): for a rank that waits on goroutine peers in the same process
	// inside its passes (tensor parallelism, ZeRO-3's gathers), where every
	// wait of a pinned goroutine wakes its own thread through the OS.
	Unpinned bool
}

// Validate checks the options.
func (o Options) Validate() error {
	if err := o.Model.Validate(); err != nil {
		return err
	}
	switch {
	case o.Kernels == nil:
		return errors.New("model: Options.Kernels is nil")
	case o.Device == nil:
		return errors.New("model: Options.Device is nil")
	case o.MicroBatch <= 0:
		return fmt.Errorf("model: micro_batch=%d must be positive", o.MicroBatch)
	case o.Recompute < RecomputeNone || o.Recompute > RecomputeFull:
		return fmt.Errorf("model: recompute=%v is not none, selective or full", o.Recompute)
	case o.Part.Split() && o.TP == nil:
		return fmt.Errorf("model: tp=%d without a TPComm", o.Part.Degree())
	case o.Compute != tensor.F32 && o.Compute != tensor.BF16 && o.Compute != tensor.F16:
		return fmt.Errorf("model: compute=%s: the runner computes in fp32, bf16 or fp16", o.Compute)
	}
	n := len(o.Model.Layout().Units)
	seen := make([]bool, n)
	for _, u := range o.Units {
		if u < 0 || u >= n {
			return fmt.Errorf("model: Options.Units: unit %d is not in [0, %d)", u, n)
		}
		if seen[u] {
			return fmt.Errorf("model: Options.Units: unit %d is listed twice", u)
		}
		seen[u] = true
	}
	return o.Part.Validate(o.Model)
}

// GPT runs the forward and backward passes of one model configuration for
// micro-batches of B sequences of T tokens. It holds no parameters (they
// come from a Params) and no activations (they live in a Stash); it owns the
// backward scratch, so one GPT runs one pass at a time.
type GPT struct {
	cfg    Config
	k      *ops.Kernels
	dev    *device.Device
	B      int
	layout Layout
	part   Part
	d      dims
	tp     TPComm
	flash  bool       // Options.Flash
	pinned bool       // !Options.Unpinned
	half   *halfState // the bf16 compute copy and scratch (nil: fp32)

	ws *device.Buffer // workspace, carved into the slices below
	// dres is the gradient of the residual stream, updated in place from
	// the head down to the embedding.
	dres []float32 // (B,T,C)
	dln  []float32 // (B,T,C) gradient of a LayerNorm's output
	// big holds, in turn, dlogits (B,T,V) in the head, then dfc2in (B,T,4C)
	// and dfc (B,T,4C) in the MLP, then dqkv (B,T,3C) and datty (B,T,C) in
	// attention: their lifetimes do not overlap.
	big     []float32 // (max(B·T·V, 8·B·T·C)); a tensor-parallel rank's sizes in dims.workspace
	branch  []float32 // (B,T,C) a branch output before dropout, or its masked gradient; nil without dropout and tp
	scratch []float32 // attention backward scratch
	tpws    tpScratch // tensor parallelism's buffers (empty without it)

	drop dropoutKeys
}

// dropoutKeys are the streams of the dropout sites: the embedding, and
// each block's attention and MLP outputs.
type dropoutKeys struct {
	embd      rng.Stream
	attn, mlp []rng.Stream // (L)
}

// New builds a model runner and allocates its backward scratch on the
// device (tag workspace).
func New(o Options) (*GPT, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	c := o.Model
	m := &GPT{cfg: c, k: o.Kernels, dev: o.Device, B: o.MicroBatch, layout: c.PartLayout(o.Part), part: o.Part, tp: o.TP, flash: o.Flash, pinned: !o.Unpinned}
	m.d = newDims(c, o.Part)
	m.d.flash, m.d.rc = o.Flash, o.Recompute
	m.d.half = o.Compute != tensor.F32
	if m.tp == nil {
		m.tp = soloTP{}
	}
	sz := m.d.workspace(m.k, m.B, c)
	ws, err := o.Device.Alloc(device.Workspace, sz.total())
	if err != nil {
		return nil, fmt.Errorf("model: backward scratch: %w", err)
	}
	m.ws = ws
	if o.Compute != tensor.F32 {
		if m.half, err = newHalf(o.Device, o.Compute, m.layout, m.d.halfScratch(m.B*c.SeqLen), c.Hidden, o.Units, o.HalfPerUnit); err != nil {
			ws.Free()
			return nil, err
		}
	}
	buf := ws.Data
	next := func(n int) []float32 {
		s := buf[:n:n]
		buf = buf[n:]
		return s
	}
	m.dres, m.dln, m.big, m.scratch = next(sz.dres), next(sz.dln), next(sz.big), next(sz.scratch)
	if sz.branch > 0 {
		m.branch = next(sz.branch)
	}
	m.tpws = tpScratch{gath: next(sz.gath), dlnl: next(sz.dlnl), lnGrad: next(sz.lnGrad), ce: next(sz.ce)}
	m.drop.embd = rng.Key(o.Seed, "dropout.embd")
	for l := 0; l < c.Layers; l++ {
		m.drop.attn = append(m.drop.attn, rng.Key(o.Seed, fmt.Sprintf("dropout.h.%d.attn", l)))
		m.drop.mlp = append(m.drop.mlp, rng.Key(o.Seed, fmt.Sprintf("dropout.h.%d.mlp", l)))
	}
	return m, nil
}

// Config is the model configuration.
func (m *GPT) Config() Config { return m.cfg }

// Part is the piece of every layer this runner computes.
func (m *GPT) Part() Part { return m.part }

// Layout is the parameter layout (PartLayout of the runner's part).
func (m *GPT) Layout() Layout { return m.layout }

// MicroBatch is B.
func (m *GPT) MicroBatch() int { return m.B }

// WorkspaceBytes is the size of the backward scratch.
func (m *GPT) WorkspaceBytes() int64 { return m.ws.Bytes() }

// DResidual is the gradient of the residual stream, (B,T,C) (with
// sequence parallelism the rank's B·T/t tokens of it). After
// BlockBackward(l) it holds the gradient with respect to block l's input;
// a pipeline stage writes the gradient it receives here before the
// backward of its last block, and reads the one it sends after the
// backward of its first.
func (m *GPT) DResidual() []float32 { return m.dres }

// Free returns the scratch to the device.
func (m *GPT) Free() {
	m.ws.Free()
	m.half.free()
}

// dropoutAt is the dropout of a site for the stash's batch: keyed by
// (seed, site, step), offset to the global index of the micro-batch's first
// element (with sequence parallelism, of the rank's first token,
// r·B·T/t), so that every split draws the masks of one device.
func (m *GPT) dropoutAt(s *Stash, site rng.Stream) ops.Dropout {
	first := 0
	if m.part.SP {
		first = m.part.Rank * s.b * s.t / m.d.t
	}
	return ops.Dropout{
		Stream: site.Sub(uint64(s.step)),
		Offset: uint64(s.sample)*uint64(m.cfg.SeqLen*m.cfg.Hidden) + uint64(first*m.cfg.Hidden),
		P:      float32(m.cfg.Dropout),
	}
}

// useDropout says whether the stash's pass applies dropout.
func (m *GPT) useDropout(s *Stash) bool { return m.cfg.Dropout > 0 && !s.eval }

// pin keeps the calling goroutine on its OS thread until the returned
// function runs (defer m.pin()()) when the kernels run on it alone: the Go
// scheduler preempts a goroutine every 10 ms or so, and with a spare P
// another thread, often on the other CPU, may resume it there with cold
// caches — on the 2-CPU machine of docs/BENCHMARKS.md that made a
// one-thread step up to 20% slower. Locks nest, so the passes and the
// per-unit methods they call may each pin. With kernel threads the
// goroutine waits for its workers at every kernel, and waking a locked
// goroutine costs a thread hand-off each time: then it is left free, and
// so is a rank that waits on goroutine peers (Options.Unpinned): each
// wait of a locked goroutine parks its thread and needs the OS to wake
// it, where an unlocked one resumes on whichever thread is running.
func (m *GPT) pin() func() {
	if m.k.Threads() != 1 || !m.pinned {
		return func() {}
	}
	runtime.LockOSThread()
	return runtime.UnlockOSThread
}
