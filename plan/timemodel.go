package plan

import "math"

// Time is the predicted step time in seconds, split as the seed's
//
//	T_step = T_compute + T_comm,exposed + T_bubble + T_misc
type Time struct {
	Compute, CommExposed, Bubble, Misc, Step float64

	MicroBatches int     // m, per data-parallel replica
	StageTime    float64 // one micro-batch's forward and backward on the slowest stage
	SlowStage    int     // which stage that is
	// Exposed communication per step, by axis (they add up to CommExposed);
	// EP is expert parallelism's all-to-all (and its ETP gathers).
	TP, CP, PP, DP, EP float64
	Optimizer          float64 // part of Misc: the memory-bound optimizer step
}

// layerCost is one transformer layer for one micro-batch on one device:
// its compute and its exposed tensor- and context-parallel communication.
// It depends on tp, cp, mbs, sp, recompute, flash, precision and where the
// tp and cp groups sit, not on dp, pp, vpp, the schedule or ZeRO.
// It also carries the embedding's and the output layer's costs, which
// depend on the same keys.
type layerCost struct {
	k               kernels
	compute         passTime
	tp, cp          float64
	embed, head     passTime
	embedTP, headTP float64
}

func (j Job) layerCost(p Plan, pl placement) layerCost {
	return j.layerCostFrom(j.computeParts(p), p, pl)
}

// layerCostFrom adds recomputation and the placement's communication to
// computed parts.
func (j Job) layerCostFrom(cp computeParts, p Plan, pl placement) layerCost {
	lc := layerCost{k: cp.k, compute: cp.withRecompute(p, j.tpOverlap(p, pl)), embed: cp.embed, head: cp.head}
	lc.tp, lc.cp = j.layerComm(p, pl, cp)
	c := j.Cluster
	S := j.tokens(p) * float64(j.Model.Hidden) * actBytes(p.Precision)
	lc.embedTP = c.allReduce(S, pl.tp)
	lc.headTP = 3 * c.allReduce(4*j.tokens(p), pl.tp)
	if p.SP {
		lc.headTP += 2 * c.allGather(S, pl.tp)
	}
	return lc
}

// stageCost is one micro-batch through one pipeline stage on one device.
type stageCost struct {
	compute passTime
	tp, cp  float64 // exposed tensor- and context-parallel communication
	pp      float64 // exposed point-to-point transfers
	zero    float64 // exposed per-micro-batch ZeRO-2/3 communication
}

func (s stageCost) total() float64 { return s.compute.total() + s.tp + s.cp + s.pp + s.zero }

// layerComm is the exposed communication of one layer for one micro-batch.
//
// Tensor parallelism moves the T·h·e activation in every pass (the
// forward, the backward and a full recomputation): two all-reduces per
// pass, or under sequence parallelism an all-gather before each
// column-parallel GEMM (QKV, MLP up) and a reduce-scatter after each
// row-parallel one (attention output, MLP down) — the same bytes. Each sits
// between dependent GEMMs, so all of it is exposed, unless the cluster's
// stack overlaps them (Cluster.TPCommOverlap, which needs sp):
// Megatron-Core's --tp-comm-overlap on Transformer Engine's userbuffers
// splits each such GEMM into t chunks of T/t rows (layerLinear costs them
// as such) and pipelines the collective with them, so only what the GEMM
// cannot cover is exposed, and at least one chunk's worth:
//
//	exposed = max(c/t, c − g)   c: the collective, g: its GEMM
//
// In the backward the roles swap: the all-gather of the output gradient
// runs with a row-parallel layer's dX GEMM and the reduce-scatter of the
// input gradient with a column-parallel layer's.
//
// Context parallelism: the engine's ring (cpRing) of blocks of K and V
// (T·2·kv/t·d values) each hidden behind a step of the core, the
// backward's fp32 sums of their gradients with them; full recomputation
// (or selective without flash, which reruns the core) passes the
// forward's blocks again.
func (j Job) layerComm(p Plan, pl placement, parts computeParts) (tp, cp float64) {
	c := j.Cluster
	m := j.Model
	S := j.tokens(p) * float64(m.Hidden) * actBytes(p.Precision)
	if j.tpOverlap(p, pl) {
		ag, rs := c.allGather(S, pl.tp), c.reduceScatter(S, pl.tp)
		g, t := parts.linear, float64(p.TP)
		hide := func(comm, gemm float64) float64 { return math.Max(comm/t, comm-gemm) }
		fwd := hide(ag, g[0].fwd) + hide(rs, g[1].fwd) + hide(ag, g[2].fwd) + hide(rs, g[3].fwd)
		bwd := hide(ag, g[1].dx) + hide(rs, g[0].dx) + hide(ag, g[3].dx) + hide(rs, g[2].dx)
		tp = fwd + bwd
		if p.Recompute == RecomputeFull {
			tp += fwd
		}
	} else {
		per := c.allReduce(S, pl.tp)
		if p.SP {
			per = c.allGather(S, pl.tp) + c.reduceScatter(S, pl.tp)
		}
		fwd, bwd := 2*per, 2*per
		if p.SP {
			// The column layers gather their inputs again for their
			// weight gradients (model/linear.go, backwardCol), as
			// Megatron does rather than keep the gathered copy.
			bwd += 2 * c.allGather(S, pl.tp)
		}
		if c.Software.TPGradOverlap && p.TP > 1 {
			bwd = j.tpGradOverlapped(p, pl, parts, S)
		}
		tp = fwd + bwd
		if p.Recompute == RecomputeFull {
			tp += fwd
		}
	}
	if p.CP > 1 {
		kv := 2 * j.tokens(p) * float64(m.KVHeads) / float64(p.TP) * float64(m.HD())
		fwd, bwd := cpRing(p.CP, kv, actBytes(p.Precision), c.link(pl.cp), parts.core)
		cp = fwd + bwd
		if p.Recompute == RecomputeFull || (p.Recompute == RecomputeSelective && !p.Flash) {
			cp += fwd
		}
	}
	return tp, cp
}

// tpGradOverlapped is the exposed tensor-parallel communication of one
// layer's backward when the framework overlaps it asynchronously
// (Software.TPGradOverlap): the collective on each column-parallel layer's
// (QKV, MLP up) input gradient hides behind its dW GEMM, and under sp the
// re-gather of its input behind its dX GEMM; the all-gathers of the
// row-parallel layers' output gradients (sp) stay exposed:
//
//	no sp: Σ_col max(0, AR − dW)
//	sp:    2·AG + Σ_col [max(0, RS − dW) + max(0, AG − dX)]
func (j Job) tpGradOverlapped(p Plan, pl placement, parts computeParts, S float64) float64 {
	c := j.Cluster
	g := parts.linear
	if !p.SP {
		ar := c.allReduce(S, pl.tp)
		return hideBehind(ar, g[0].dw) + hideBehind(ar, g[2].dw)
	}
	ag, rs := c.allGather(S, pl.tp), c.reduceScatter(S, pl.tp)
	e := 2 * ag
	for _, col := range []linearTime{g[0], g[2]} {
		e += hideBehind(rs, col.dw) + hideBehind(ag, col.dx)
	}
	return e
}

// stage costs one micro-batch through stage s holding n layers, the
// embedding on the first stage and the output layer and loss on the last,
// their tensor-parallel collectives (vocab-parallel embedding: one
// all-reduce or reduce-scatter; output layer under sequence parallelism:
// all-gather forward, reduce-scatter backward; the loss: three small
// all-reduces), pipeline transfers (pipeComm) and per-micro-batch ZeRO
// traffic.
func (j Job) stage(p Plan, pl placement, lc layerCost, sp shapeParams, s int) stageCost {
	layer := lc.compute
	n := sp.pt.on(s)
	nl := float64(n)
	var sc stageCost
	sc.compute = layer.scale(nl)
	sc.tp, sc.cp = lc.tp*nl, lc.cp*nl
	if s == 0 {
		sc.compute = sc.compute.add(lc.embed)
		sc.tp += lc.embedTP
	}
	if s == p.PP-1 {
		sc.compute = sc.compute.add(lc.head)
		sc.tp += lc.headTP
	}
	if p.PP > 1 {
		sc.pp = j.pipeComm(p, pl, layer, sp.pt)
	}
	if b := j.Cluster.Software.gradAccumBytes(p.Precision); b > 0 {
		sc.compute.bwd += lc.k.stream(sp.params(s, n)*b, 1)
	}
	if j.engineBF16(p) {
		sc.compute = sc.compute.add(j.engineHalfFetch(p, newKernels(j.Cluster.Accel, FP32), sp.params(s, n)))
	}
	sc.zero = j.zeroPerMicroBatch(p, pl, layer, sc, sp, s, n)
	return sc
}

// pipeComm is the exposed point-to-point traffic of one micro-batch on one
// stage: each of the vpp chunks receives an activation in the forward and a
// gradient in the backward (2·vpp transfers of boundaryBytes). 1F1B and
// GPipe exchange them synchronously between the two neighbours, so they
// sit on the critical path (4·vpp when the engine blocks on each send and
// each receive separately, Software.PPBlockingP2P); the interleaved schedule posts them
// asynchronously and computes another chunk meanwhile, so only a
// transfer's excess over one chunk's forward (or backward) is exposed.
func (j Job) pipeComm(p Plan, pl placement, layer passTime, pt partition) float64 {
	t := p2p(j.boundaryBytes(p), j.Cluster.link(pl.pp))
	v := float64(p.VPP)
	if p.Schedule != Interleaved {
		if j.Cluster.Software.PPBlockingP2P {
			return 4 * v * t
		}
		return 2 * v * t
	}
	chunk := layer.scale(pt.chunk)
	return v * (math.Max(0, t-chunk.fwd) + math.Max(0, t-chunk.bwd-chunk.rc))
}

// zeroPerMicroBatch is the exposed ZeRO traffic each micro-batch repeats.
// ZeRO-2 reduce-scatters the stage's gradients after every micro-batch's
// backward (it keeps no full gradient to accumulate into), hidden behind
// that backward except the last bucket. ZeRO-3 all-gathers each layer's
// parameters before its forward and again before its backward, and
// reduce-scatters its gradients after; the next layer's gather is
// prefetched behind the current layer's compute, so only the excess of
// communication over compute is exposed, plus the first unit's gather.
// The cluster's software decides how many collectives a layer's gather is
// (Software.ZeRO3Modules, each paying its latency), whether full
// recomputation gathers again in the backward (Software.ZeRO3Regather) and
// whether the backward's gather is issued only after the previous layer's
// backward, so that it is exposed whole (Software.ZeRO3BackwardPost).
func (j Job) zeroPerMicroBatch(p Plan, pl placement, layer passTime, sc stageCost, sp shapeParams, s, n int) float64 {
	if j.hostBusy() { // see hostBusy and busyHost
		return j.busyHost(func(k Job, w float64) float64 {
			hidden := sc
			hidden.compute, hidden.tp = sc.compute.scale(w), sc.tp*w
			return k.zeroExposed(p, pl, layer.scale(w), hidden, sp, s, n)
		})
	}
	return j.zeroExposed(p, pl, layer, sc, sp, s, n)
}

// busyHost is the exposed part of data-parallel or ZeRO traffic on a CPU
// host whose ranks keep every core busy, given exposed(k, w): the traffic
// exposed on job k's links behind the compute windows scaled by w. What
// needs a core — the collectives on the host's own links, the hand-off
// and the copies — hides behind nothing (w = 0); where the ranks emulate
// slower links (Cluster.OwnLinks), the rest is wire time, a sleep,
// and hides behind the windows as a device's transfers do, the ranks'
// compute stretched by the sharing (w = g, hostTime's D/S(D')):
//
//	exposed = E_own(0) + max(E_emulated(g) − E_own(g), 0)
func (j Job) busyHost(exposed func(k Job, w float64) float64) float64 {
	own := j
	if j.Cluster.OwnLinks == nil {
		return exposed(own, 0)
	}
	own.Cluster.Intra, own.Cluster.Inter = j.Cluster.OwnLinks[0], j.Cluster.OwnLinks[1]
	g := j.hostStretch()
	return exposed(own, 0) + math.Max(exposed(j, g)-exposed(own, g), 0)
}

// zeroExposed is zeroPerMicroBatch behind the windows given.
func (j Job) zeroExposed(p Plan, pl placement, layer passTime, sc stageCost, sp shapeParams, s, n int) float64 {
	c := j.Cluster
	w, g := weightBytes(p.Precision), gradBytes(p.Precision)
	switch p.ZeRO {
	case 2:
		P := sp.params(s, n)
		nb, first := j.dpBuckets(p, s, P)
		all := c.reduceScatter(P*g, pl.dp)
		if j.Engine != nil && j.Engine.Buckets != nil { // the engine's buckets, each a collective
			all = nb * c.reduceScatter(P/nb*g, pl.dp)
		}
		return math.Max(c.reduceScatter(first*g, pl.dp), all-sc.compute.bwd-sc.compute.rc)
	case 3:
		nl := float64(n)
		sw := c.Software
		mods := sw.modules()
		ag := mods * c.allGather(sp.layer*w/mods, pl.dp)
		rs := mods * c.reduceScatter(sp.layer*g/mods, pl.dp)
		bwdGathers := 1.0
		if sw.ZeRO3Regather && p.Recompute == RecomputeFull {
			bwdGathers = 2
		}
		perLayerTP := 0.0
		if n > 0 {
			perLayerTP = sc.tp / nl
		}
		bwd := math.Max(0, bwdGathers*ag+rs-layer.bwd-layer.rc)
		if sw.ZeRO3BackwardPost {
			bwd = ag + math.Max(0, (bwdGathers-1)*ag+rs-layer.bwd-layer.rc)
		}
		exposed := nl * (math.Max(0, ag-layer.fwd-perLayerTP/3) + bwd)
		first := ag
		if s == 0 || s == p.PP-1 {
			first = math.Max(ag, c.allGather(sp.vocab*w, pl.dp))
		}
		return exposed + first
	}
	return 0
}

// stepComm is the data-parallel traffic done once per step, and what of it
// is exposed. ZeRO-0 all-reduces the gradients and ZeRO-1 reduce-scatters
// them, bucket by bucket as the last micro-batch's backward produces them
// (one collective per 40M-parameter bucket, each paying its latency),
// so all but the last bucket hide behind that backward (and, on stage s of
// a pipeline, behind the s backward steps of the drain that follow it
// elsewhere). ZeRO-1/2 then all-gather the updated parameters, hidden
// behind the next step's first forward except the first bucket. A tied
// embedding's gradient is all-reduced between the first and last stages.
func (j Job) stepComm(p Plan, pl placement, sp shapeParams, first, last stageCost) float64 {
	if j.hostBusy() { // see hostBusy and busyHost
		return j.busyHost(func(k Job, w float64) float64 {
			f, l := first, last
			f.compute, l.compute = first.compute.scale(w), last.compute.scale(w)
			return k.stepExposed(p, pl, sp, f, l)
		})
	}
	return j.stepExposed(p, pl, sp, first, last)
}

// stepExposed is stepComm behind the windows given.
func (j Job) stepExposed(p Plan, pl placement, sp shapeParams, first, last stageCost) float64 {
	c := j.Cluster
	w, g := weightBytes(p.Precision), gradBytes(p.Precision)
	exposed := 0.0
	for _, s := range []int{0, p.PP - 1} {
		sc := first
		if s != 0 {
			sc = last
		}
		P := sp.stage(s)
		nb, bucket := j.dpBuckets(p, s, P)
		each := P / nb
		window := sc.compute.bwd + sc.compute.rc
		slack := float64(s) * (last.compute.bwd + last.compute.rc)
		var e float64
		switch p.ZeRO {
		case 0:
			e = math.Max(c.allReduce(bucket*g, pl.dp), nb*c.allReduce(each*g, pl.dp)-window-slack)
		case 1:
			e = math.Max(c.reduceScatter(bucket*g, pl.dp), nb*c.reduceScatter(each*g, pl.dp)-window-slack)
		}
		if p.ZeRO == 1 || p.ZeRO == 2 {
			e += math.Max(c.allGather(bucket*w, pl.dp), nb*c.allGather(each*w, pl.dp)-first.compute.fwd)
		}
		exposed = math.Max(exposed, e)
	}
	if p.PP > 1 && j.Model.Tied {
		exposed += c.allReduce(sp.vocab*g, group{n: 2, k: min(2, pl.pp.k)})
	}
	return exposed
}

// optimizerTime is the memory-bound optimizer step over the parameters
// this device updates (its ZeRO shard when zero≥1): AdamW reads the
// gradient (g bytes), reads and writes the fp32 master weight and both
// moments (24) and writes the working copy (w), and global-norm clipping
// and zeroing the gradients read and write them once more (2g):
// 3g + 24 + w bytes per parameter, 32 for fp16, 38 for bf16 and fp8
// (fp32 gradients); fp32 has no separate master: 3·4 + 24 = 36. Under fp8
// every weight on the device is then cast to its fp8 copies for the next
// step (read 2, write 1 + 1 transposed).
func (j Job) optimizerTime(p Plan, sp shapeParams, k kernels) float64 {
	all := sp.maxStage()
	P := all
	if p.ZeRO >= 1 {
		P /= float64(p.DP * p.CP)
	}
	bytes := 3*gradBytes(p.Precision) + 24 + weightBytes(p.Precision)
	if p.Precision == FP32 {
		bytes = 36
	}
	t := k.stream(P*bytes, 4)
	if p.Precision == FP8 {
		t += k.stream(4*all, 1)
	}
	return t
}

// tpOverlap reports whether p's tensor-parallel collectives are pipelined
// with their GEMMs: sequence parallelism, on a cluster whose stack does it,
// with the tensor group inside one node (userbuffers work over NVLink).
func (j Job) tpOverlap(p Plan, pl placement) bool {
	return p.SP && p.TP > 1 && j.Cluster.TPCommOverlap && pl.tp.nodes() == 1
}

// hostBusy reports whether the job's ranks keep every core of a CPU host
// busy (Cluster.Cores > 0, ranks × threads ≥ cores). The engine's
// collectives run on goroutines of their own that need a core, so while
// the ranks compute on all of them no communication overlaps computation:
// ZeRO's prefetched gathers and bucketed reductions are exposed whole,
// each paying the hand-off latency (the [intra] α `trellis profile`
// measures between computing ranks).
func (j Job) hostBusy() bool {
	ranks, threads := j.hostRanks()
	return j.Cluster.Cores > 0 && ranks*threads >= j.Cluster.Cores
}

// polledHost is j on the intra-node link its ranks meet: where the
// cluster gives a polled one (Cluster.PolledIntra) and the job's ranks on
// a CPU host do not outnumber its cores (ranks × threads ≤ cores, the
// engine's comm/local.PollFor), that link, in place of Intra (or of the
// own intra link under emulation, Cluster.OwnLinks); j as it is
// elsewhere. Idempotent: the result has no PolledIntra.
func (j Job) polledHost() Job {
	c := j.Cluster
	pl := c.PolledIntra
	if pl == nil {
		return j
	}
	c.PolledIntra = nil
	if ranks, threads := j.hostRanks(); c.Cores > 0 && ranks*threads <= c.Cores {
		if c.OwnLinks != nil {
			own := *c.OwnLinks
			own[0] = *pl
			c.OwnLinks = &own
		} else {
			c.Intra = *pl
		}
	}
	j.Cluster = c
	return j
}

// hostRanks is the ranks one CPU host runs (the job's devices, at most
// the node's) and the kernel threads each rank runs (Engine.Threads, at
// least 1).
func (j Job) hostRanks() (ranks, threads int) {
	threads = 1
	if j.Engine != nil && j.Engine.Threads > 0 {
		threads = j.Engine.Threads
	}
	return min(j.Devices, max(1, j.Cluster.DevicesPerNode)), threads
}

// hostTime shares a CPU host's cores among its ranks (Cluster.Cores > 0;
// on other clusters it returns t as it is). The stage times assume each
// device computes alone; on a host, D = ranks on the node × threads per
// rank threads compete for C cores that, n ≤ C of them busy, compute S(n)
// times one core's rate: S(n) = 1 + (n−1)·(S_C − 1)/(C − 1), linear
// between the measured ends (S_C = Cluster.CoreSpeedup). With D' =
// min(D, C) two bounds hold on the CPU part of the step:
//
//	throughput  every rank's compute and misc share the cores:
//	            D·(mean compute + misc) / S(D'), the ranks' mean
//	            (meanCompute: a pipeline's stages differ)
//	dependency  the slowest rank's chain (compute, bubble, misc) at the
//	            rate one of D' busy cores keeps: (compute + bubble +
//	            misc)·D'/S(D')
//
// (both relative to a device of t threads alone, which the profile's
// peak already credits with S(min(t, C))). The step is the larger bound
// plus the exposed communication. The ranks' mean compute and misc are
// reported stretched by g = D/S(D') (the rate a rank keeps while all
// compute; the mean, as the engine's split reports the ranks' mean), the
// bubble is what remains of the bound — a faster stage's wait for a
// slower one included: oversubscribed cores fill a pipeline's
// bubble with other stages' work, but only where enough stages are ready
// to fill them. For a 1F1B or GPipe pipeline whose ranks outnumber the
// cores (pipe not nil: 1F1B, GPipe, interleaved) a third bound is its simulated step, the lanes
// taking the cores as they come free (hostPipe.makespan, each lane's
// passes its own stage's, stretched by D'/S(D')), plus misc at g.
func (j Job) hostTime(t Time, meanCompute float64, pipe *hostPipe) Time {
	c := j.Cluster
	if c.Cores <= 0 {
		return t
	}
	_, threads := j.hostRanks()
	d, g, dep := j.hostRates()
	work := t.Compute + t.Misc // the slowest rank's chain
	shared := meanCompute + t.Misc
	cpu := math.Max(g*shared, dep*(work+t.Bubble))
	if slots := c.Cores / threads; pipe != nil && d > c.Cores && slots >= 1 {
		cpu = math.Max(cpu, pipe.makespan(slots, dep)+g*t.Misc)
	}
	t.Compute = g * meanCompute
	t.Misc *= g
	t.Optimizer *= g
	t.Bubble = cpu - g*shared
	t.Step = cpu + t.CommExposed
	return t
}

// hostRates are hostTime's D (the host's rank threads), g = D/S(D') and
// D'/S(D') (relative to a device of t threads alone, S(min(t, C))/t).
func (j Job) hostRates() (d int, g, dep float64) {
	c := j.Cluster
	ranks, threads := j.hostRanks()
	S := func(n int) float64 {
		n = min(max(n, 1), c.Cores)
		if c.Cores <= 1 {
			return 1
		}
		return 1 + float64(n-1)*(c.CoreSpeedup-1)/float64(c.Cores-1)
	}
	d = ranks * threads
	busy := min(d, max(c.Cores, 1))
	alone := S(threads) / float64(threads)
	return d, float64(d) / S(busy) * alone, float64(busy) / S(busy) * alone
}

// hostStretch is g: how much longer a rank's compute takes while the
// host's ranks share its cores.
func (j Job) hostStretch() float64 {
	_, g, _ := j.hostRates()
	return g
}

// onHost marks the tensor- and context-parallel groups of pl with the
// part of their collectives' latency that other ranks' work hides on a
// CPU host whose ranks outnumber its cores (group.hidden = 1 −
// hostFill). A wait there costs the step only the cores it leaves idle:
// those collectives sit inside the forward and backward and block their
// group's n ranks while the others compute (a tp=2 group among four
// ranks on two cores leaves none idle). What they move still takes the
// cores (the in-process copies and sums), so the bandwidth part is paid
// whole. The data-parallel and ZeRO traffic keeps its latency: every
// replica reaches it together, no rank is left computing. Expert
// parallelism's all-to-alls are not marked (not measured on shared cores).
func (j Job) onHost(p Plan, pl placement) placement {
	if j.Cluster.Cores <= 0 {
		return pl
	}
	pl.tp.hidden = 1 - j.hostFill(p.TP)
	pl.cp.hidden = 1 - j.hostFill(p.CP)
	return pl
}

// hostFill is the part of a wait on a group of n of the host's R ranks
// that leaves its cores idle, the rest being filled by the other ranks'
// work: with C/t rank slots (C cores, t threads a rank), the R − n
// running ranks hold one each, and the n blocked ranks share the idle
// max(C/t − R + n, 0), each exposing
//
//	min(max(C/t − R + n, 0) · R/(C/t · n), 1)
//
// of its wait — comm.Crowding's share, by which the engine books its
// waits. 1 where the ranks do not outnumber the slots or the group is the
// whole host.
func (j Job) hostFill(n int) float64 {
	ranks, threads := j.hostRanks()
	if j.Cluster.Cores <= 0 || n >= ranks {
		return 1
	}
	slots, r, g := float64(j.Cluster.Cores)/float64(threads), float64(ranks), float64(max(n, 1))
	return min(max(slots-r+g, 0)*r/(slots*g), 1)
}
