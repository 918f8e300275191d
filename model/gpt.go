package model

import (
	"errors"
	"fmt"
	"runtime"

	"trellis/arch"
	"trellis/comm"
	"trellis/device"
	"trellis/ops"
	"trellis/precision"
	"trellis/rng"
	"trellis/tensor"
)

// The architecture's vocabulary, as the runner speaks it.
type (
	Config    = arch.Config
	Part      = arch.Part
	Layout    = arch.Layout
	Unit      = arch.Unit
	Tensor    = arch.Tensor
	Slice     = arch.Slice
	Recompute = arch.Recompute
)

const (
	RecomputeNone      = arch.RecomputeNone
	RecomputeSelective = arch.RecomputeSelective
	RecomputeFull      = arch.RecomputeFull
)

// Options is everything New needs.
type Options struct {
	Model      Config
	Kernels    ops.Backend
	Device     *device.Device // where stashes (act) and the passes' scratch (workspace) are charged
	MicroBatch int            // B, sequences per micro-batch
	Seed       uint64         // keys the dropout masks
	// Part is the piece of every layer this rank computes under tensor
	// (and sequence) parallelism; the zero value is the whole model.
	Part Part
	// TP is the tensor-parallel group's communication (nil: one rank).
	TP TPComm
	// EP is the expert-parallel group's communication (Part.EP > 1: the
	// rank holds Part.EPRank's share of every MoE layer's experts).
	EP EPComm
	// Flash runs IO-aware attention (ops.FlashAttentionForward/Backward):
	// the stash keeps (B,NH,T) log-sum-exps instead of the (B,NH,T,T)
	// probabilities and the backward needs no (T,T) scratch.
	Flash bool
	// Recompute drops activations from the stash that the backward
	// recomputes (see arch.Recompute).
	Recompute Recompute
	// Precision is the mixed-precision policy (the zero value: fp32). The
	// Params hand the weights out in its Param dtype; the layers compute in
	// Compute and save their operands in Stash.
	Precision precision.Policy
	// Unpinned leaves the passes free to move between OS threads (see
	// pin): for a rank that waits on goroutine peers in the same process
	// inside its passes (tensor parallelism, ZeRO-3's gathers), where every
	// wait of a pinned goroutine wakes its own thread through the OS.
	Unpinned bool
	// CP is the context-parallel group (nil or of size 1: none): the rank
	// holds two of 2·cp chunks of every sequence (cpSplit) and attention
	// runs as a ring over the group (ring.go). The ring never holds a
	// (T,T) matrix and keeps log-sum-exps as flash does, whatever Flash
	// says: under cp the stash is flash's.
	CP comm.Group
	// CPContiguous gives rank r the contiguous chunks 2r, 2r+1 instead of
	// the load-balanced r, 2·cp−1−r (for measuring the imbalance).
	CPContiguous bool
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
	case o.Part.EPDegree() > 1 && o.EP == nil:
		return fmt.Errorf("model: ep=%d without an EPComm", o.Part.EPDegree())
	}
	if o.CP != nil && o.CP.Size() > 1 {
		if err := checkCP(o.Model.SeqLen, o.CP.Size()); err != nil {
			return fmt.Errorf("model: %w", err)
		}
		if o.Part.SP && (o.Model.SeqLen/o.CP.Size())%o.Part.Degree() != 0 {
			return fmt.Errorf("model: sp=on, cp=%d: tp=%d does not divide the rank's seq_len/cp=%d tokens", o.CP.Size(), o.Part.Degree(), o.Model.SeqLen/o.CP.Size())
		}
	}
	if err := o.Precision.Validate(); err != nil {
		return fmt.Errorf("model: %w", err)
	}
	return o.Part.Validate(o.Model)
}

// GPT runs the passes of one model configuration for micro-batches of B
// sequences of T tokens on one rank's part. It holds no parameters (they
// come from a Params) and no activations (they live in a Stash); it owns
// the passes' scratch, so one GPT runs one pass at a time.
type GPT struct {
	cfg    Config
	k      ops.Backend
	dev    *device.Device
	B      int
	T      int    // the rank's tokens of a training sequence: seq_len, or seq_len/cp
	layout Layout // PartLayout(part): the units' tensors, which Params hands out
	part   Part
	d      dims
	tp     TPComm
	ep     EPComm
	pol    precision.Policy
	pinned bool // !Options.Unpinned

	ws   *device.Buffer // fp32 scratch, carved into w
	ws16 *device.Buffer // 16-bit scratch (nil in fp32)
	w    scratch
	// routeBytes are the MoE routing's int32 scratch, charged to workspace.
	routeBytes int64
	// rerun: a block's forward is being recomputed inside its backward
	// (its routing is not counted again).
	rerun bool
	stats *expertCounter // shared with a paired runner (ShareRouting)
	// bias are the MoE blocks' expert biases (router_expert_bias; rows as
	// stats' Layers, E each; bias.go), nil without.
	bias [][]float32
	q8   *q8 // fp8's scratch and amax histories (nil unless the policy is fp8)

	drop dropoutKeys

	cp    comm.Group // nil: cp = 1
	split cpSplit
	ring  ringBufs
	work  RingWork
	// ringHeld is the bytes of ring messages that arrived before their
	// receives were posted, charged to the device's comm tag (chargeRing).
	ringHeld int64
	// ringSerial posts each ring transfer after its step's compute
	// instead of before (the overlap benchmark's baseline; never set
	// outside this package's tests).
	ringSerial bool
}

// scratch are the passes' buffers (sizes in dims.go's workspace).
type scratch struct {
	// dres is the gradient of the residual stream, updated in place from
	// the head down to the embedding.
	dres []float32 // (n,C)
	dln  []float32 // (B,T,C) gradient of a norm's output
	// big holds, in turn, the logits' gradient in the head, the MLP's and
	// then attention's gradients in a block's backward, and a 16-bit
	// forward's fp32 GEMM outputs (gpt2.go).
	big     []float32
	branch  []float32 // (n,C) a branch output before dropout, or its gradient; nil without dropout and tp
	scratch []float32 // attention backward scratch
	gath    []float32 // (B,T,C) SP: a gathered norm output or branch gradient
	dlnl    []float32 // (n,C) SP: the rank's tokens of a column layer's input gradient
	lnGrad  []float32 // (2C) SP: one micro-batch's norm parameter gradients, summed over the group
	ce      []float32 // (3·B·T) the vocab-parallel loss's row max, sum of exps and target logit
	vec     []float32 // (13C) 16-bit: a unit's vectors widened
	// cos, sin are a Llama's RoPE table (T, HS/2): ops.RoPETable.
	cos, sin []float32
	x        tensor.Buf
	dy       tensor.Buf
	moe      moeScratch // an MoE model's (moe.go)
}

// dropoutKeys are the streams of the dropout sites: the embedding, and
// each block's attention and MLP outputs.
type dropoutKeys struct {
	embd      rng.Stream
	attn, mlp []rng.Stream // (L)
}

// New builds a model runner and allocates its scratch on the device (tag
// workspace).
func New(o Options) (*GPT, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	c := o.Model
	m := &GPT{cfg: c, k: o.Kernels, dev: o.Device, B: o.MicroBatch, layout: c.PartLayout(o.Part), part: o.Part,
		tp: o.TP, ep: o.EP, pol: o.Precision, pinned: !o.Unpinned}
	m.d = newDims(c, o.Part)
	m.d.flash, m.d.rc, m.d.half = o.Flash, o.Recompute, o.Precision.Half()
	m.T = c.SeqLen
	if o.CP != nil && o.CP.Size() > 1 {
		n := o.CP.Size()
		m.cp, m.d.cp, m.T = o.CP, n, c.SeqLen/n
		m.d.flash = true // the ring's stash: log-sum-exps
		m.split = cpSplit{n: n, r: o.CP.Rank(), T: c.SeqLen, c: c.SeqLen / (2 * n), contiguous: o.CPContiguous}
	}
	if m.tp == nil {
		m.tp = soloTP{}
	}
	m.stats = newExpertCounter(c)
	if err := m.allocScratch(); err != nil {
		return nil, err
	}
	if err := m.allocQ8(); err != nil {
		m.Free()
		return nil, err
	}
	m.drop.embd = rng.Key(o.Seed, "dropout.embd")
	for l := 0; l < c.Layers; l++ {
		m.drop.attn = append(m.drop.attn, rng.Key(o.Seed, fmt.Sprintf("dropout.h.%d.attn", l)))
		m.drop.mlp = append(m.drop.mlp, rng.Key(o.Seed, fmt.Sprintf("dropout.h.%d.mlp", l)))
	}
	return m, nil
}

// allocScratch allocates and carves the scratch (tag workspace).
func (m *GPT) allocScratch() error {
	sz := workspace(m.cfg, m.d, m.B, m.T, attnWorkers(m.k, m.B, m.d.KV))
	ws, err := m.dev.Alloc(device.Workspace, sz.f32())
	if err != nil {
		return fmt.Errorf("model: scratch: %w", err)
	}
	m.ws = ws
	buf := ws.Data
	next := func(n int) []float32 {
		s := buf[:n:n]
		buf = buf[n:]
		return s
	}
	w := &m.w
	w.dres, w.dln, w.big, w.scratch = next(sz.dres), next(sz.dln), next(sz.big), next(sz.scratch)
	if sz.branch > 0 {
		w.branch = next(sz.branch)
	}
	w.gath, w.dlnl, w.lnGrad, w.ce, w.vec = next(sz.gath), next(sz.dlnl), next(sz.lnGrad), next(sz.ce), next(sz.vec)
	if sz.rope > 0 {
		w.cos, w.sin = next(sz.rope/2), next(sz.rope/2)
		m.ropeTable()
	}
	var ringH []uint16
	if m.d.half {
		dt := m.pol.Compute
		if m.ws16, err = m.dev.AllocOf(device.Workspace, dt, sz.x+sz.dy+sz.ringH+sz.moeDy); err != nil {
			m.ws.Free()
			return fmt.Errorf("model: %s scratch: %w", dt, err)
		}
		bits := m.ws16.Bits
		w.x, w.dy = tensor.Halves(dt, bits[:sz.x:sz.x]), tensor.Halves(dt, bits[sz.x:sz.x+sz.dy:sz.x+sz.dy])
		h := sz.x + sz.dy
		ringH, w.moe.half = bits[h:h+sz.ringH:h+sz.ringH], bits[h+sz.ringH:]
	}
	if sz.ring > 0 {
		m.carveRing(next(sz.ring), ringH)
	}
	if sz.moe > 0 {
		return m.allocMoE(buf, sz)
	}
	return nil
}

// allocMoE carves an MoE model's scratch from the rest of the fp32 one,
// buf, and the 16-bit one (arch's MoEWorkspace order), and allocates its
// routing's int32 arrays, charged to workspace.
func (m *GPT) allocMoE(buf []float32, sz wsSizes) error {
	c, n, ep, cp := m.cfg, m.B*m.T, m.d.ep, max(1, m.d.cp)
	R, Rx, C, E, K, Fe := c.Routed(n, cp), c.ExpertRows(n, ep, cp), c.Hidden, c.Experts, c.TopK, m.d.moe.Fe
	next := func(k int) []float32 {
		s := buf[:k:k]
		buf = buf[k:]
		return s
	}
	w := &m.w.moe
	w.rows, w.dact, w.dgu, w.dp, w.gates, w.dgates = next(max(R, n)*C), next(Rx*Fe), next(2*Rx*Fe), next(n*E), next(n*K), next(n*K)
	if ep > 1 {
		w.grp, w.exp, w.counts = next(Rx*C), next(Rx*C), next(2*E)
	}
	if cp > 1 {
		w.cpSel, w.cpP = next((cp+1)*n*K), next(E)
	}
	if m.d.half {
		h, dt := w.half, m.pol.Compute
		h1 := max(Rx*max(C, 2*Fe), n*E)
		w.dy = tensor.Halves(dt, h[:h1:h1])
		if ep > 1 {
			w.sendX, w.recvX = tensor.Halves(dt, h[h1:h1+R*C:h1+R*C]), tensor.Halves(dt, h[h1+R*C:h1+R*C+Rx*C])
		}
	} else if ep > 1 {
		w.sendX, w.recvX = tensor.F32s(w.rows[:R*C]), tensor.F32s(w.grp)
	}
	m.routeBytes = 4 * int64(sz.route)
	if err := m.dev.Reserve(device.Workspace, m.routeBytes); err != nil {
		m.Free()
		return fmt.Errorf("model: routing scratch: %w", err)
	}
	w.r = routing{experts: make([]int32, n*K), rows: make([]int32, n*K), gates: w.gates, load: make([]int32, E), offs: make([]int32, E+1)}
	w.r.aload, w.auxP = w.r.load, make([]float64, E)
	if cp > 1 {
		w.r.aload, w.cpFill = make([]int32, E), make([]int32, E)
	}
	if ep > 1 {
		w.perm, w.local = make([]int32, Rx), make([]int32, E/ep+1)
	}
	w.gemms = make([]ops.GEMM, 0, E)
	if c.RouterExpertBias {
		m.bias = make([][]float32, len(m.stats.s.Layers))
		for i := range m.bias {
			m.bias[i] = make([]float32, E) // counted in Route (arch's MoEWorkspace)
		}
	}
	return nil
}

// Config is the model configuration.
func (m *GPT) Config() Config { return m.cfg }

// Part is the piece of every layer this runner computes.
func (m *GPT) Part() Part { return m.part }

// Layout is the parameter layout (PartLayout of the runner's part).
func (m *GPT) Layout() Layout { return m.layout }

// Precision is the runner's mixed-precision policy.
func (m *GPT) Precision() precision.Policy { return m.pol }

// MicroBatch is B.
func (m *GPT) MicroBatch() int { return m.B }

// WorkspaceBytes is the size of the scratch.
func (m *GPT) WorkspaceBytes() int64 {
	n := m.ws.Bytes() + m.routeBytes
	if m.ws16 != nil {
		n += m.ws16.Bytes()
	}
	return n
}

// DResidual is the gradient of the residual stream, (B,T,C) (with
// sequence parallelism the rank's B·T/t tokens of it). After
// BlockBackward(l) it holds the gradient with respect to block l's input;
// a pipeline stage writes the gradient it receives here before the
// backward of its last block, and reads the one it sends after the
// backward of its first.
func (m *GPT) DResidual() []float32 { return m.w.dres }

// Free returns the scratch to the device.
func (m *GPT) Free() {
	m.ws.Free()
	m.ws16.Free()
	if m.routeBytes > 0 {
		m.dev.Release(device.Workspace, m.routeBytes)
		m.routeBytes = 0
	}
	m.q8.free()
	m.dev.Release(device.Comm, m.ringHeld)
	m.ringHeld = 0
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
		Offset: uint64(s.sample)*uint64(m.cfg.SeqLen*m.cfg.Hidden) + uint64(first*m.cfg.Hidden), // without cp (with it: dropout, cp.go)
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
