package plan

import (
	"fmt"
	"math"
)

// Software is what the training stack on a cluster does with the
// communication a plan implies: properties of the framework and its
// collective library, not of the plan (Cluster.TPCommOverlap is another).
// The zero value is the ideal framework: hierarchical collectives, one
// ZeRO-3 gather per layer, prefetched, no regather under recomputation, no
// asynchronous tensor-parallel backward. docs/PLANNER.md ("Clusters")
// says which published stack has which.
type Software struct {
	// TPGradOverlap: the collective on a column-parallel layer's input
	// gradient (an all-reduce, or a reduce-scatter under sp) runs while the
	// layer's weight-gradient GEMM computes, and under sp the re-gather of
	// that layer's input (which the dW GEMM needs) while its dX GEMM
	// computes: Megatron-LM since 2022 (the asynchronous path of
	// LinearWithGradAccumulationAndAsyncCommunication, on by default).
	// File key tp_grad_overlap.
	TPGradOverlap bool
	// FlatRings: all-gathers, reduce-scatters and ring all-reduces over a
	// group that spans nodes with several members per node run as one ring
	// through all n members (NCCL's ring algorithm), n−1 steps each paying
	// the inter-node latency, instead of the hierarchical schedule (k−1
	// steps inside the node, nodes−1 across). The bandwidth term is the
	// same: the ring's k channels each cross one of the node's k rails.
	// File key flat_rings.
	FlatRings bool
	// ZeRO3Modules is how many collectives one layer's ZeRO-3 gather (and
	// its gradient reduce-scatter) is split into: 1 (or 0) when the
	// framework gathers each transformer layer as one unit (FSDP's
	// transformer auto-wrap, torchtitan's per-block fully_shard), 4 when it
	// gathers each linear module on its own (DeepSpeed ZeRO-3's per-module
	// hooks). Each collective pays its own latency. File key zero3_modules.
	ZeRO3Modules int
	// ZeRO3Regather: full recomputation gathers a layer's parameters again
	// inside the backward (DeepSpeed ZeRO-3 releases them after the
	// recomputed forward and fetches them again for the backward; FSDP's
	// checkpoint inside the wrapped unit reuses the backward's one
	// gather). File key zero3_regather.
	ZeRO3Regather bool
	// ZeRO3BackwardPost: the backward's gather of the next layer is issued
	// only after the current layer's backward has finished (FSDP's
	// BACKWARD_POST prefetch, Composer's default), so each layer's
	// backward waits for its whole gather; the ideal (and FSDP's
	// BACKWARD_PRE, FSDP2's default) issues it before, behind the current
	// layer's compute. File key zero3_backward_post.
	ZeRO3BackwardPost bool
	// PPBlockingP2P: the pipeline engine sends and receives each
	// activation and gradient as its own blocking transfer, four per
	// micro-batch and chunk on a middle stage, where Megatron pairs a send
	// with the receive that follows it (two): DeepSpeed's pipeline engine
	// (Megatron-DeepSpeed, GPT-NeoX). File key pp_blocking_p2p.
	PPBlockingP2P bool
	// GradAccumPass: bf16 gradients are added into an fp32 accumulator by
	// a separate memory-bound pass after every micro-batch's backward
	// (read 2 + read 4 + write 4 bytes per parameter of the stage), where
	// Megatron accumulates in fp32 inside the dW GEMM: DeepSpeed's bf16
	// optimizer. File key grad_accum_pass.
	GradAccumPass bool
	// OpSAC: recompute=selective is torchtitan's per-op selective
	// activation checkpointing (selective_ac_option = "op", sac.go), not
	// Megatron's recomputation of the attention core. File key op_sac;
	// the general path (models with experts or MLA, DualPipe plans).
	OpSAC bool
	// FP32Params: each rank's (ZeRO-sharded) parameters are the fp32
	// master copy, with 16-bit copies gathered only to compute, and Adam
	// keeps m and v (8 bytes): 4 + 4 + 8 bytes of states per parameter
	// where Megatron's distributed optimizer keeps 2 + 4 + 12 (FSDP2 with
	// MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), as
	// torchtitan trains). File key fp32_params; the general path.
	FP32Params bool
	// FP8CurrentScaling: fp8 plans quantise each GEMM input and output
	// gradient with its own amax (Transformer Engine's
	// Float8CurrentScaling recipe, Megatron's --fp8-recipe tensorwise,
	// Megatron-Bridge's "FP8_CS" recipes): an amax pass, a scale and a cast
	// kernel per tensor, 6 bytes per element where delayed scaling writes
	// the fp8 copies in the producing kernel (kernels.fp8Casts). File key
	// fp8_current_scaling.
	FP8CurrentScaling bool

	// MoE is what the stack does with an expert-parallel plan's tokens
	// (moecost.go).
	MoE MoESoftware
}

// MoESoftware is the expert-parallel half of a training stack's software
// profile. The zero value is Megatron-Core's all-to-all dispatcher with
// grouped GEMMs and no EP overlap.
type MoESoftware struct {
	// Dispatcher moves the routed tokens between the expert-parallel
	// ranks (file key moe_dispatcher): "alltoall" (or ""), NCCL's
	// all-to-all of every (token, expert) copy, Megatron's
	// --moe-token-dispatcher-type alltoall; "allgather", every rank
	// gathers all the group's tokens and keeps its experts' (Megatron's
	// allgather dispatcher); "deepep", node-aware dispatch that sends a
	// token once to each destination node over InfiniBand and forwards it
	// over NVLink inside the node (DeepSeek's DeepEP; NVIDIA's HybridEP;
	// Megatron's flex dispatcher).
	Dispatcher string
	// EPOverlap: the all-to-alls of one micro-batch run beside the compute
	// of another (Megatron-Core's --overlap-moe-expert-parallel-comm with
	// its combined 1F1B schedule, Kimi K2's interleaved 1F1B with extra
	// warm-up); DualPipe schedules do this by construction. File key
	// moe_ep_overlap.
	EPOverlap bool
	// ExpertLoop: a rank's local experts run as a loop of GEMMs, one kernel
	// each (Megatron's SequentialMLP, without --moe-grouped-gemm); the
	// default is one grouped GEMM. File key moe_expert_loop.
	ExpertLoop bool
	// FP8Dispatch: under fp8 the dispatched activations travel in fp8 with
	// one fp32 scale per 128 values (DeepSeek-V3 §3.3.2); the combine stays
	// in 16 bits. File key moe_fp8_dispatch.
	FP8Dispatch bool
	// CommSMs is the streaming multiprocessors the dispatch and combine
	// kernels hold while they overlap another micro-batch's compute (EP
	// overlap, DualPipe), which then runs on the rest: DeepEP's normal
	// kernels take 24 (its README's Buffer.set_num_sms(24)), DeepSeek-V3's
	// DualPipe setup 20 of the H800's 132 (report §3.2.2). 0: not modelled
	// (the overlap is free, as for NCCL's all-to-all, whose SMs no source
	// gives). File key moe_comm_sms; needs the device's sms.
	CommSMs int
	// EPOverlapEff is the most of an overlapped all-to-all the stack hides
	// (EP overlap, DualPipe), however much compute runs beside it: an
	// overlapped transfer of a seconds stays exposed for at least
	// (1 − EPOverlapEff)·a (the scheduling of the combined 1F1B, the
	// transfers' waits on the compute streams' events, the chunks whose
	// partner has no compute to run). 0: not given, the ideal 1. File key
	// moe_ep_overlap_eff, in (0, 1]. Megatron-Core's EP overlap: 0.57,
	// fitted on NVIDIA's one published measurement of it (docs/PLANNER.md,
	// "Calibration"; TestEPOverlapEffIsFittedOnItsRun).
	EPOverlapEff float64
}

// commShare is the fraction of the device's SMs the overlapped expert
// communication holds (0 when either count is not given).
func (c Cluster) commShare() float64 {
	if c.Accel.SMs <= 0 || c.Software.MoE.CommSMs <= 0 {
		return 0
	}
	return float64(c.Software.MoE.CommSMs) / float64(c.Accel.SMs)
}

// overlapFloor is the least fraction of an overlapped expert transfer
// that stays exposed: the share of the SMs its kernels hold (commShare),
// or what the stack's overlap cannot hide (1 − Software.MoE.EPOverlapEff),
// the larger.
func (c Cluster) overlapFloor() float64 {
	f := c.commShare()
	if e := c.Software.MoE.EPOverlapEff; e > 0 {
		f = math.Max(f, 1-e)
	}
	return f
}

// overlapExposed is what an overlapped transfer of a seconds adds to the
// c seconds of compute beside it when the transfer's kernels hold a share
// s of the SMs: while it runs the compute advances at 1 − s, so the pair
// takes max(a, c + a·s), and the exposure is
//
//	max(a − c, a·s)
//
// (s = 0: the free overlap max(0, a − c)).
func overlapExposed(a, c, s float64) float64 {
	if a <= 0 {
		return 0
	}
	return math.Max(a-c, a*s)
}

// gradAccumBytes is what GradAccumPass moves per parameter and micro-batch
// for precision p: bf16 and fp8 weights have bf16 gradients accumulated
// into fp32; fp16 and fp32 accumulate in their own type inside autograd.
func (s Software) gradAccumBytes(p Precision) float64 {
	if !s.GradAccumPass || (p != BF16 && p != FP8) {
		return 0
	}
	return 2 + 4 + 4
}

// validate names the first field out of range.
func (s Software) validate(cluster string) error {
	if s.ZeRO3Modules < 0 || s.ZeRO3Modules > 64 {
		return fmt.Errorf("plan: cluster %s: zero3_modules=%d: must be between 1 and 64 (0 means 1)", cluster, s.ZeRO3Modules)
	}
	if s.MoE.CommSMs < 0 || s.MoE.CommSMs > 1e5 {
		return fmt.Errorf("plan: cluster %s: moe_comm_sms=%d: must be between 0 (not modelled) and 100000", cluster, s.MoE.CommSMs)
	}
	if e := s.MoE.EPOverlapEff; e < 0 || e > 1 || math.IsNaN(e) {
		return fmt.Errorf("plan: cluster %s: moe_ep_overlap_eff=%g: must be in (0, 1] (0: not given, the ideal 1)", cluster, e)
	}
	switch s.MoE.Dispatcher {
	case "", "alltoall", "allgather", "deepep":
	default:
		return fmt.Errorf("plan: cluster %s: moe_dispatcher=%q: want alltoall, allgather or deepep", cluster, s.MoE.Dispatcher)
	}
	return nil
}

// modules is the number of ZeRO-3 collectives per layer and direction.
func (s Software) modules() float64 { return float64(max(1, s.ZeRO3Modules)) }

// flatRing is a reduce-scatter or all-gather of S bytes as one ring over
// the g.n members of a group spread k per node over several nodes:
//
//	t = (n−1)·α_inter + (n−1)/n · S / min(k·β_inter, β_intra)
//
// every step waits for the slowest hop (an inter-node one); the k channels
// of the ring each leave the node through one of its k rails, so a node
// moves k·β_inter, unless NVLink is the narrower.
func (c Cluster) flatRing(S float64, g group) float64 {
	n := float64(g.n)
	bw := math.Min(float64(g.k)*c.Inter.BW, c.Intra.BW)
	return (n-1)*c.Inter.Latency + (n-1)/n*S/bw
}

// flatRingAllReduce is NCCL's choice over the whole group: two rings, or a
// double binary tree across all n members (2·⌈log2 n⌉ inter-node steps).
func (c Cluster) flatRingAllReduce(S float64, g group) float64 {
	bw := math.Min(float64(g.k)*c.Inter.BW, c.Intra.BW)
	tree := 2*math.Ceil(math.Log2(float64(g.n)))*c.Inter.Latency + 2*S/bw
	return math.Min(2*c.flatRing(S, g), tree)
}

// buckets splits P parameters into the framework's gradient buckets: how
// many collectives a data-parallel reduction of P issues (each pays its
// latency), at least one.
func buckets(P float64) float64 { return math.Max(1, math.Ceil(P/bucketParams)) }

// hideBehind is what of a collective c stays exposed when it runs
// concurrently with independent compute g.
func hideBehind(c, g float64) float64 { return math.Max(0, c-g) }
