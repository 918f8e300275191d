package plan

import "math"

// kernels turns work into seconds on one device for one precision.
type kernels struct {
	a    Accel
	peak float64 // FLOP/s of matrix products
	e    float64 // bytes per activation element
	mem  float64 // achievable memory bandwidth, bytes/s
	fp8  bool    // GEMMs quantise their operands to fp8
	// hiPeak is the peak of the work that stays in 16-bit under fp8: the
	// attention core and the output layer (Transformer Engine's default
	// recipe); peak itself otherwise.
	hiPeak float64
	// fp8CS: the fp8 GEMMs' inputs and output gradients are quantised with
	// current scaling (Software.FP8CurrentScaling), not delayed scaling.
	fp8CS bool
}

// kernelsFor is newKernels for p's precision with the cluster software's
// fp8 scaling recipe.
func (j Job) kernelsFor(p Precision) kernels {
	k := newKernels(j.Cluster.Accel, p)
	k.fp8CS = k.fp8 && j.Cluster.Software.FP8CurrentScaling
	return k
}

// fp8Casts is what quantising a GEMM's input and its output gradient
// moves per element, and their kernels (gemmParts):
//
//	delayed scaling  the input's two fp8 copies (row- and column-major)
//	                 written by the kernel that produces it, 2 bytes, no
//	                 kernel of its own; the output gradient cast and
//	                 transposed by one kernel, read 2 + write 1 + 1
//	current scaling  the scale is the tensor's own amax, which no single
//	                 pass knows before it writes: Transformer Engine's
//	                 Float8CurrentScalingQuantizer::quantize runs
//	                 nvte_compute_amax (read 2), nvte_compute_scale_from_amax
//	                 and nvte_quantize_v2 (read 2, write 1 + 1), three
//	                 kernels and 6 bytes for the input and for the gradient
func (k kernels) fp8Casts() (in, inKernels, grad, gradKernels float64) {
	if k.fp8CS {
		return 6, 3, 6, 3
	}
	return 2, 0, 4, 1
}

func newKernels(a Accel, p Precision) kernels {
	k := kernels{a: a, peak: a.Peak[p], e: actBytes(p), mem: a.MemBW * a.MemEff, fp8: p == FP8, hiPeak: a.Peak[p]}
	if k.fp8 {
		k.hiPeak = a.Peak[BF16]
	}
	return k
}

// high is the kernels for work that fp8 leaves in 16-bit.
func (k kernels) high() kernels {
	k.peak, k.fp8 = k.hiPeak, false
	return k
}

// gemmEfficiency is the fraction of peak an (m×k)·(k×n) product reaches:
//
//	η = η_max · m/(m+κ) · n/(n+κ) · k/(k+κ)
//
// η_max is the best a tuned library reaches (Accel.GEMMEff) and κ
// (Accel.GEMMKnee) is the dimension at which a factor is one half: small
// dimensions leave tiles partly empty, waves of tiles unbalanced across the
// multiprocessors and the k-loop's prologue and epilogue unamortised, so a
// small GEMM runs further from peak than a large one.
func (k kernels) gemmEfficiency(m, n, kk float64) float64 {
	q := k.a.GEMMKnee
	return k.a.GEMMEff * m / (m + q) * n / (n + q) * kk / (kk + q)
}

// gemm is the time of `count` independent (m×k)·(k×n) products (a batched
// GEMM when count > 1): the larger of the compute time at the size-dependent
// efficiency and the time to stream the operands (roofline), plus one
// kernel gap.
func (k kernels) gemm(count, m, n, kk float64) float64 {
	flops := 2 * m * n * kk * count
	compute := flops / (k.peak * k.gemmEfficiency(m, n, kk))
	memory := k.e * (m*kk + kk*n + m*n) * count / k.mem
	return math.Max(compute, memory) + k.a.KernelGap
}

// gemmFB is the forward and backward time of a linear layer Y = X·W with
// X (m×k), W (k×n): forward m×n×k; backward dX = dY·Wᵀ (m×k×n) and
// dW = Xᵀ·dY (k×n×m), twice the forward FLOPs.
//
// In fp8 (Transformer Engine's recipe) the input X is cast to fp8 in the
// kernel that produces it (the LayerNorm, the activation function), which
// writes it twice, row- and column-major (the second for dW): 2 more bytes
// per input element; the output gradient dY is cast and transposed by its
// own kernel (read 2, write 1 + 1): 4 bytes per element. The weight's fp8
// copy is cast once per step and reused by every micro-batch (its cost is
// in optimizerTime).
func (k kernels) gemmFB(m, n, kk float64) (fwd, bwd float64) {
	fwd, dx, dw := k.gemmParts(m, n, kk, 1)
	return fwd, dx + dw
}

// gemmParts is gemmFB with the backward split into dX (with the fp8
// quantisation of the output gradient) and dW. The forward and dX products
// run as `chunks` sequential GEMMs of m/chunks rows each, as when a
// tensor-parallel collective is pipelined with them (layerComm): smaller
// GEMMs, further from peak.
func (k kernels) gemmParts(m, n, kk, chunks float64) (fwd, dx, dw float64) {
	fwd, dx, dw = chunks*k.gemm(1, m/chunks, n, kk), chunks*k.gemm(1, m/chunks, kk, n), k.gemm(1, kk, n, m)
	if k.fp8 {
		in, ik, g, gk := k.fp8Casts()
		fwd += k.stream(in*m*kk, ik)
		dx += k.stream(g*m*n, gk)
	}
	return fwd, dx, dw
}

// stream is a memory-bound kernel moving `bytes`: bytes / (β_mem·η_mem)
// plus `kernels` kernel gaps.
func (k kernels) stream(bytes, kernels float64) float64 {
	return bytes/k.mem + kernels*k.a.KernelGap
}

// passTime is compute seconds for one micro-batch through a part of the
// model on one device.
type passTime struct {
	fwd, bwd float64 // forward; backward (without recomputation)
	rc       float64 // recomputation done during the backward
	// wgt is the part of bwd that computes weight gradients (the dW
	// GEMMs): what a zero-bubble schedule defers (W) while the rest of the
	// backward (B) stays on the critical path.
	wgt float64
}

func (a passTime) add(b passTime) passTime {
	return passTime{a.fwd + b.fwd, a.bwd + b.bwd, a.rc + b.rc, a.wgt + b.wgt}
}

func (a passTime) scale(f float64) passTime {
	return passTime{a.fwd * f, a.bwd * f, a.rc * f, a.wgt * f}
}

func (a passTime) total() float64 { return a.fwd + a.bwd + a.rc }

// computeParts are the compute times that depend on tp, cp, mbs, sp,
// flash and the precision, not on recomputation or placement: one layer
// (without recomputation), its attention core, the embedding and the
// output layer.
type computeParts struct {
	k           kernels
	core        passTime
	embed, head passTime
	// layer is one layer's compute with whole GEMMs, and with the forward
	// and dX GEMMs split into tp chunks (when its tensor-parallel
	// collectives are pipelined with them: tpOverlap).
	layer, chunked passTime
	// linear are the forward, input-gradient (dX) and weight-gradient
	// (dW) times of the four linear layers (QKV, attention output, MLP up,
	// MLP down), chunked under tpOverlap: the GEMMs that tensor-parallel
	// collectives overlap with.
	linear [4]linearTime
}

// linearTime is one linear layer's forward GEMM, its input-gradient GEMM
// (the backward's dX = dY·Wᵀ) and its weight-gradient GEMM (dW = Xᵀ·dY).
type linearTime struct{ fwd, dx, dw float64 }

func (j Job) computeParts(p Plan) computeParts {
	k := j.kernelsFor(p.Precision)
	ke := k // the rest of the layer: the engine's is fp32 (engineHalfCompute)
	if j.engineBF16(p) {
		ke = newKernels(j.Cluster.Accel, FP32)
	}
	c := computeParts{k: k, core: j.attentionCore(p, ke), embed: j.embedCompute(p, ke), head: j.headCompute(p, k)}
	rest := c.core.add(j.elementwise(p, ke))
	if j.engineBF16(p) {
		rest = rest.add(j.engineHalfCompute(p, ke))
	}
	lin, each := j.layerLinear(p, k, 1)
	c.layer, c.linear = lin.add(rest), each
	if p.SP && p.TP > 1 && j.Cluster.TPCommOverlap {
		lin, c.linear = j.layerLinear(p, k, float64(p.TP))
		c.chunked = lin.add(rest)
	}
	return c
}

// withRecompute adds the recomputation a policy does during the backward:
// full repeats the layer's forward, selective the materialised attention
// core (nothing under flash). overlap picks the chunked GEMMs.
func (c computeParts) withRecompute(p Plan, overlap bool) passTime {
	lt := c.layer
	if overlap {
		lt = c.chunked
	}
	switch p.Recompute {
	case RecomputeFull:
		lt.rc = lt.fwd
	case RecomputeSelective:
		if !p.Flash {
			lt.rc = c.core.fwd
		}
	}
	return lt
}

// layerLinear is the four linear layers of one transformer layer for one
// micro-batch of T = mbs·seq/cp tokens on one of t tensor ranks, in total
// and one by one, with the forward and dX GEMMs run as `chunks` pieces.
func (j Job) layerLinear(p Plan, k kernels, chunks float64) (passTime, [4]linearTime) {
	m := j.Model
	T := j.tokens(p)
	h, f, d := float64(m.Hidden), float64(m.FFN), float64(m.HD())
	a, kv, t := float64(m.Heads), float64(m.KVHeads), float64(p.TP)
	up := f / t
	if m.gated() {
		up = 2 * f / t
	}
	var lt passTime
	var each [4]linearTime
	for i, g := range [4][2]float64{{(a + 2*kv) * d / t, h}, {h, a * d / t}, {up, h}, {h, f / t}} {
		fw, dx, dw := k.gemmParts(T, g[0], g[1], chunks)
		lt.fwd += fw
		lt.bwd += dx + dw
		lt.wgt += dw
		each[i] = linearTime{fw, dx, dw}
	}
	return lt, each
}

// attentionCore is softmax(QKᵀ/√d)·V for one micro-batch: b·a/t heads of
// s/cp queries against s keys (context parallelism splits the queries and
// streams the keys). Materialised: two batched GEMMs forward and four
// backward over the full s×s scores (masked, not skipped), plus the fused
// scale-mask-softmax and GPT's attention dropout streaming the scores
// through memory. Flash (and the engine's ring attention under cp, which
// runs blockwise whatever flash says: ringTiles): 4·b·(a/t)·s_q·s·d FLOPs
// halved by causal block skipping, at η = attnEff of peak forward and 80%
// of that backward, whose five products are 2.5× the forward's FLOPs,
// plus under cp the ring's tiles' fixed cost (ringTileTime):
//
//	t_fwd = F/(η·peak)    t_bwd = 2.5·F/(0.8·η·peak)    F = 2·b·(a/t)·s_q·s·d
//
// On an engine cluster with a measured table (attnTable) both cores are
// the table's instead: b·(a/t)·s·(s+1)/2 causal scores at its cost per
// score for the sequence length and head size (AttnTable.Core).
func (j Job) attentionCore(p Plan, k kernels) passTime {
	k = k.high()
	m := j.Model
	heads := float64(p.MBS) * float64(m.Heads) / float64(p.TP)
	sq, sk, d := float64(j.Seq)/float64(p.CP), float64(j.Seq), float64(m.HD())
	if t := j.attnTable(p); t != nil {
		return t.Core(p.Flash, heads, j.Seq, m.HD())
	}
	if p.Flash || j.ringTiles(p) {
		flops := 4 * heads * sq * sk * d * 0.5
		eff := k.peak * j.attnEff(p)
		return passTime{fwd: flops/eff + k.a.KernelGap, bwd: 2.5*flops/(0.8*eff) + k.a.KernelGap}.add(j.ringTileTime(p, heads))
	}
	scores := heads * sq * sk
	fwdBytes, bwdBytes := 2*k.e, 3*k.e // softmax: read+write; backward: read P, dP, write dS
	if m.Dropout {
		fwdBytes += 2*k.e + 1 // read, write, mask
		bwdBytes += 2*k.e + 1
	}
	fwd := k.gemm(heads, sq, sk, d) + k.gemm(heads, sq, d, sk) + k.stream(scores*fwdBytes, 2)
	bwd := k.gemm(heads, sk, d, sq) + k.gemm(heads, sq, sk, d) + k.gemm(heads, sq, d, sk) +
		k.gemm(heads, sk, d, sq) + k.stream(scores*bwdBytes, 2)
	return passTime{fwd: fwd, bwd: bwd}
}

// attnTable is the cluster's measured attention cores where they price
// p's: an engine cluster's table (Accel.Attn) at a head size it covers
// (AttnTable.Covers: one it measured, or whole 32-column tiles), without
// cp (ring attention's tiles have their own fit). nil: the efficiency
// model.
func (j Job) attnTable(p Plan) *AttnTable {
	if a := j.Cluster.Accel.Attn; a != nil && j.Cluster.EngineStash && p.CP == 1 && a.Covers(j.Model.HD()) {
		return a
	}
	return nil
}

// ringTiles: the attention core runs as the engine's ring attention
// (model/ring.go), cp > 1 on a cluster of engine ranks, blockwise with
// log-sum-exps whether or not flash is on.
func (j Job) ringTiles(p Plan) bool { return p.CP > 1 && j.Cluster.EngineStash }

// attnEff is the fraction of peak the blockwise attention core reaches
// forward: Accel.RingAttnEff under cp when the cluster gives it (the ring's
// per-block kernels, measured by `trellis profile`), Accel.AttnNarrowEff
// on an engine cluster that gives it for a head size the engine's flash
// cannot tile, Accel.AttnEff otherwise (flash; a GPU stack's ring runs
// its flash kernels).
func (j Job) attnEff(p Plan) float64 {
	a := j.Cluster.Accel
	if p.CP > 1 && a.RingAttnEff > 0 {
		return a.RingAttnEff
	}
	if j.Cluster.EngineStash && a.AttnNarrowEff > 0 && !FlashHeadTiled(j.Model.HD()) {
		return a.AttnNarrowEff
	}
	return a.AttnEff
}

// FlashHeadTiled says whether the Trellis engine's flash kernels run
// head size hd on their tiled path (ops.Kernels.FlashTiled on AVX-512:
// whole 32-column tiles); other head sizes run the blocked path, at
// Accel.AttnNarrowEff.
func FlashHeadTiled(hd int) bool { return hd%32 == 0 }

// ringTileTime is the fixed cost of a rank's ring-attention tiles under
// cp (Accel.RingTileGap γ per tile, forward and backward): the sequence
// in 2·cp chunks, a rank's two query chunks meet 2·cp+1 key chunks on or
// before them (the balanced split: chunks r and 2·cp−1−r), per head,
// split as the tile's products are (two forward, five backward):
//
//	n = heads·(2·cp + 1)    t_fwd = n·γ·2/7    t_bwd = n·γ·5/7
func (j Job) ringTileTime(p Plan, heads float64) passTime {
	g := j.Cluster.Accel.RingTileGap
	if p.CP <= 1 || g == 0 {
		return passTime{}
	}
	n := heads * float64(2*p.CP+1)
	return passTime{fwd: n * g * 2 / 7, bwd: n * g * 5 / 7}
}

// elementwise is the memory-bound work of one layer: two norms (read and
// write h per token each), two residual adds (read 2h, write h; GPT's
// fused bias-dropout-add also writes an h-byte mask), the activation
// function (GELU reads and writes f; SwiGLU reads 2f and writes f) and
// rotary embeddings on q and k (Llama). Norms and residuals run on all T
// tokens on every tensor rank unless sequence parallelism splits them; the
// rest is split by tp. The backward moves about twice the forward's bytes.
func (j Job) elementwise(p Plan, k kernels) passTime {
	m := j.Model
	h, f, d := float64(m.Hidden), float64(m.FFN), float64(m.HD())
	t := float64(p.TP)
	repl := 4*h*k.e + 2*3*h*k.e
	if m.Dropout {
		repl += 2 * h
	}
	if p.SP {
		repl /= t
	}
	split := 2 * f * k.e
	kern := 5.0
	if m.gated() {
		split = 3*f*k.e + 2*float64(m.Heads+m.KVHeads)*d*k.e
		kern = 6
	}
	bytes := j.tokens(p) * (repl + split/t)
	return passTime{fwd: k.stream(bytes, kern), bwd: k.stream(2*bytes, 2*kern)}
}

// embedCompute is the first stage's embedding lookup (write T·h) and its
// backward (a scatter-add into the table's gradient).
func (j Job) embedCompute(p Plan, k kernels) passTime {
	bytes := j.tokens(p) * float64(j.Model.Hidden) * k.e
	return passTime{fwd: k.stream(2*bytes, 1), bwd: k.stream(3*bytes, 1)}
}

// headCompute is the last stage's final norm, output layer (T×V/t×h) and
// vocab-parallel cross-entropy in fp32, pass by pass as Megatron's
// _VocabParallelCrossEntropy runs it over the T × V/t logits:
//
//	forward   upcast to fp32 (read e, write 4), max (read 4), subtract the
//	          max (read 4, write 4), exp (read 4, write 4), sum (read 4),
//	          normalise in place and keep the softmax (read 4, write 4):
//	          e + 36 bytes per logit in 6 kernels
//	backward  gradient = softmax − one-hot, scaled (read 4, write 4), cast
//	          back for the output layer's backward (read 4, write e):
//	          12 + e bytes per logit in 2 kernels
//
// For a 128K vocabulary on a small model this is several percent of the
// step (Megatron-Core's later --cross-entropy-loss-fusion removes passes).
func (j Job) headCompute(p Plan, k kernels) passTime {
	k = k.high()
	m := j.Model
	T, h, vt := j.tokens(p), float64(m.Hidden), float64(m.Vocab)/float64(p.TP)
	fw, bw := k.gemmFB(T, vt, h)
	norm := T * h * k.e * 2
	ce := T * vt
	return passTime{
		fwd: fw + k.stream(norm, 1) + k.stream(ce*(k.e+36), 6),
		bwd: bw + k.stream(2*norm, 1) + k.stream(ce*(12+k.e), 2),
	}
}
