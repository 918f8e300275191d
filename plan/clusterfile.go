package plan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
)

// clusterFile is the on-disk form of a Cluster, in TOML or JSON, with human
// units (GiB, GB/s, TFLOP/s, µs). Every field may be omitted when base names
// a preset to start from; otherwise the ones marked required must be given.
//
//	name = "my-cluster"
//	base = "dgx-h100"          # optional: start from a preset
//	devices_per_node = 8       # required without base
//	[device]
//	name = "H100"
//	memory_gib = 80            # required without base
//	reserved_gib = 1.5
//	mem_bw_gbps = 3350         # required without base
//	peak_tflops = { bf16 = 989.4, fp16 = 989.4, fp8 = 1978.9, fp32 = 494.7 }   # required without base
//	gemm_efficiency = 0.72     # default 0.7
//	gemm_knee = 128            # default 64
//	attn_efficiency = 0.5      # default 0.7 × gemm_efficiency
//	attn_narrow_efficiency = 0.3 # the Trellis engine's flash at head sizes not a multiple of 32 (default attn_efficiency)
//	ring_attn_efficiency = 0.2 # attention under cp (ring attention's blocks; default attn_efficiency)
//	ring_tile_us = 5           # fixed cost of one ring-attention tile, forward + backward (default 0)
//	mem_efficiency = 0.8       # default 0.8
//	convert_efficiency = 0.7   # the Trellis engine's fp32 ⇄ bf16 conversion passes (default 0: mem_efficiency)
//	kernel_gap_us = 2          # default 0
//	sms = 132                  # streaming multiprocessors (default 0: not given; presets: A100 108, H100/H200 132)
//	[device.attention]         # the Trellis engine's attention cores, measured (`trellis profile`; engine clusters; default: the efficiency model)
//	seq = [128, 1024]          # sequence lengths (ascending)
//	head = [32, 64]            # head sizes (ascending)
//	flash_fwd = [[1.2, 2.0], [0.9, 1.5]]   # ns per causal score T·(T+1)/2 of one head: a row per seq, a value per head
//	flash_bwd = [[2.6, 4.3], [2.0, 3.6]]   # and so dense_fwd, dense_bwd (the materialising core); all four required
//	tp_comm_overlap = true     # TP collectives pipelined with GEMMs under sp (default false; Hopper presets true)
//	engine_stash = true        # ranks run the Trellis engine: its activation formula (default false)
//	tp_grad_overlap = true     # TP input-gradient collectives behind the dW GEMMs (Megatron ≥ 2022; default false; Hopper presets true)
//	flat_rings = true          # cross-node all-gather/reduce-scatter as one NCCL ring over all ranks (default false: hierarchical)
//	zero3_modules = 4          # ZeRO-3 collectives per layer: 1 per layer (FSDP), 4 per linear module (DeepSpeed) (default 1)
//	zero3_regather = true      # full recomputation gathers ZeRO-3 parameters again (DeepSpeed) (default false)
//	zero3_backward_post = true # the backward's ZeRO-3 gather issued after the previous layer's backward (FSDP BACKWARD_POST) (default false)
//	pp_blocking_p2p = true     # each pipeline send and receive blocks on its own (DeepSpeed's engine) (default false)
//	grad_accum_pass = true     # bf16 gradients added into fp32 by a pass per micro-batch (DeepSpeed bf16) (default false)
//	op_sac = true              # recompute=selective is torchtitan's per-op checkpointing (general path) (default false)
//	fp32_params = true         # sharded fp32 parameters, 4+4+8 bytes of states (FSDP2, torchtitan; general path) (default false)
//	fp8_current_scaling = true # fp8 quantises with each tensor's own amax: amax pass + cast kernel (TE Float8CurrentScaling) (default false: delayed)
//	moe_dispatcher = "deepep"  # expert tokens: alltoall (NCCL, default), allgather, deepep (node-aware: DeepEP, HybridEP)
//	moe_ep_overlap = true      # expert all-to-alls beside another micro-batch's compute (Megatron's EP overlap) (default false)
//	moe_expert_loop = true     # local experts as a loop of GEMMs, not one grouped GEMM (default false)
//	moe_fp8_dispatch = true    # fp8 plans dispatch tokens in fp8 (DeepSeek-V3) (default false)
//	moe_comm_sms = 24          # SMs the dispatcher's kernels hold while they overlap compute (DeepEP 24, DeepSeek-V3 20; default 0)
//	moe_ep_overlap_eff = 0.57  # the most of an overlapped all-to-all the stack hides (Megatron-Core's EP overlap 0.57; default 0: 1)
//	cores = 2                  # CPU cores a node's devices share (a CPU host; default 0: devices have their own)
//	core_speedup = 1.9         # what `cores` threads computing at once reach over one (required with cores)
//	[intra]                    # required without base
//	bw_gbps = 360
//	latency_us = 4
//	polled_bw_gbps = 18        # a CPU host's ranks whose waits poll (threads ≤ cores; default: bw_gbps, latency_us)
//	polled_latency_us = 3
//	[inter]                    # required without base
//	bw_gbps = 45
//	latency_us = 8
type clusterFile struct {
	Name           string      `toml:"name" json:"name"`
	Base           string      `toml:"base" json:"base"`
	DevicesPerNode *int        `toml:"devices_per_node" json:"devices_per_node"`
	TPCommOverlap  *bool       `toml:"tp_comm_overlap" json:"tp_comm_overlap"`
	EngineStash    *bool       `toml:"engine_stash" json:"engine_stash"`
	TPGradOverlap  *bool       `toml:"tp_grad_overlap" json:"tp_grad_overlap"`
	FlatRings      *bool       `toml:"flat_rings" json:"flat_rings"`
	ZeRO3Modules   *int        `toml:"zero3_modules" json:"zero3_modules"`
	ZeRO3Regather  *bool       `toml:"zero3_regather" json:"zero3_regather"`
	PPBlockingP2P  *bool       `toml:"pp_blocking_p2p" json:"pp_blocking_p2p"`
	ZeRO3BwdPost   *bool       `toml:"zero3_backward_post" json:"zero3_backward_post"`
	GradAccumPass  *bool       `toml:"grad_accum_pass" json:"grad_accum_pass"`
	OpSAC          *bool       `toml:"op_sac" json:"op_sac"`
	FP32Params     *bool       `toml:"fp32_params" json:"fp32_params"`
	FP8CS          *bool       `toml:"fp8_current_scaling" json:"fp8_current_scaling"`
	MoEDispatcher  *string     `toml:"moe_dispatcher" json:"moe_dispatcher"`
	MoEEPOverlap   *bool       `toml:"moe_ep_overlap" json:"moe_ep_overlap"`
	MoEExpertLoop  *bool       `toml:"moe_expert_loop" json:"moe_expert_loop"`
	MoEFP8Dispatch *bool       `toml:"moe_fp8_dispatch" json:"moe_fp8_dispatch"`
	MoECommSMs     *int        `toml:"moe_comm_sms" json:"moe_comm_sms"`
	MoEOverlapEff  *float64    `toml:"moe_ep_overlap_eff" json:"moe_ep_overlap_eff"`
	Cores          *int        `toml:"cores" json:"cores"`
	CoreSpeedup    *float64    `toml:"core_speedup" json:"core_speedup"`
	Device         *deviceFile `toml:"device" json:"device"`
	Intra          *linkFile   `toml:"intra" json:"intra"`
	Inter          *linkFile   `toml:"inter" json:"inter"`
}

type deviceFile struct {
	Name       string             `toml:"name" json:"name"`
	MemoryGiB  *float64           `toml:"memory_gib" json:"memory_gib"`
	Reserved   *float64           `toml:"reserved_gib" json:"reserved_gib"`
	MemBWGBps  *float64           `toml:"mem_bw_gbps" json:"mem_bw_gbps"`
	PeakTFLOPs map[string]float64 `toml:"peak_tflops" json:"peak_tflops"`
	GEMMEff    *float64           `toml:"gemm_efficiency" json:"gemm_efficiency"`
	GEMMKnee   *float64           `toml:"gemm_knee" json:"gemm_knee"`
	AttnEff    *float64           `toml:"attn_efficiency" json:"attn_efficiency"`
	AttnNarrow *float64           `toml:"attn_narrow_efficiency" json:"attn_narrow_efficiency"`
	RingEff    *float64           `toml:"ring_attn_efficiency" json:"ring_attn_efficiency"`
	RingTileUS *float64           `toml:"ring_tile_us" json:"ring_tile_us"`
	MemEff     *float64           `toml:"mem_efficiency" json:"mem_efficiency"`
	ConvEff    *float64           `toml:"convert_efficiency" json:"convert_efficiency"`
	KernelGap  *float64           `toml:"kernel_gap_us" json:"kernel_gap_us"`
	SMs        *int               `toml:"sms" json:"sms"`
	Attention  *attnTableFile     `toml:"attention" json:"attention"`
}

// attnTableFile is [device.attention]: an AttnTable in ns per score.
type attnTableFile struct {
	Seq      []int       `toml:"seq" json:"seq"`
	Head     []int       `toml:"head" json:"head"`
	FlashFwd [][]float64 `toml:"flash_fwd" json:"flash_fwd"`
	FlashBwd [][]float64 `toml:"flash_bwd" json:"flash_bwd"`
	DenseFwd [][]float64 `toml:"dense_fwd" json:"dense_fwd"`
	DenseBwd [][]float64 `toml:"dense_bwd" json:"dense_bwd"`
}

// table converts the file's nanoseconds to an AttnTable's seconds.
func (f *attnTableFile) table() *AttnTable {
	t := &AttnTable{Seq: f.Seq, Head: f.Head}
	for k, c := range [AttnKinds][][]float64{f.FlashFwd, f.FlashBwd, f.DenseFwd, f.DenseBwd} {
		t.Cost[k] = make([][]float64, len(c))
		for i, row := range c {
			t.Cost[k][i] = make([]float64, len(row))
			for j, v := range row {
				t.Cost[k][i][j] = v * 1e-9
			}
		}
	}
	return t
}

type linkFile struct {
	BWGBps    *float64 `toml:"bw_gbps" json:"bw_gbps"`
	LatencyUS *float64 `toml:"latency_us" json:"latency_us"`
	// [intra] only: the link where a CPU host's ranks poll their waits
	// (Cluster.PolledIntra); both or neither.
	PolledBWGBps    *float64 `toml:"polled_bw_gbps" json:"polled_bw_gbps"`
	PolledLatencyUS *float64 `toml:"polled_latency_us" json:"polled_latency_us"`
}

// ParseClusterFile reads a cluster description in TOML, or in JSON when the
// text starts with '{'. Unknown keys are errors naming them; the result is
// validated.
func ParseClusterFile(data []byte) (Cluster, error) {
	var f clusterFile
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '{' {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			return Cluster{}, fmt.Errorf("plan: cluster file: %w", err)
		}
	} else {
		md, err := toml.Decode(string(data), &f)
		if err != nil {
			return Cluster{}, fmt.Errorf("plan: cluster file: %w", err)
		}
		if u := md.Undecoded(); len(u) > 0 {
			keys := make([]string, len(u))
			for i, k := range u {
				keys[i] = k.String()
			}
			sort.Strings(keys)
			return Cluster{}, fmt.Errorf("plan: cluster file: unknown keys %s", strings.Join(keys, ", "))
		}
	}
	c, err := f.build()
	if err != nil {
		return Cluster{}, err
	}
	return c, c.Validate()
}

func (f clusterFile) build() (Cluster, error) {
	var c Cluster
	haveBase := f.Base != ""
	if haveBase {
		b, err := ClusterPreset(f.Base)
		if err != nil {
			return c, fmt.Errorf("plan: cluster file: base: %w", err)
		}
		c = b
		c.Accel.Peak = copyPeaks(b.Accel.Peak)
	} else {
		c.Accel = Accel{GEMMEff: 0.7, GEMMKnee: 64, MemEff: 0.8}
	}
	c.Name = pick(f.Name, c.Name, "cluster")
	if f.DevicesPerNode != nil {
		c.DevicesPerNode = *f.DevicesPerNode
	} else if !haveBase {
		return c, fmt.Errorf("plan: cluster file: devices_per_node is required (or give base)")
	}
	if f.TPCommOverlap != nil {
		c.TPCommOverlap = *f.TPCommOverlap
	}
	if f.EngineStash != nil {
		c.EngineStash = *f.EngineStash
	}
	f.applySoftware(&c.Software)
	if f.Cores != nil {
		c.Cores = *f.Cores
		if f.CoreSpeedup == nil && c.Cores > 0 {
			return c, fmt.Errorf("plan: cluster file: core_speedup is required with cores=%d", c.Cores)
		}
	}
	setF(&c.CoreSpeedup, f.CoreSpeedup, 1)
	if f.Device == nil && !haveBase {
		return c, fmt.Errorf("plan: cluster file: [device] is required (or give base)")
	}
	if f.Device != nil {
		if err := f.Device.apply(&c.Accel, haveBase); err != nil {
			return c, err
		}
	}
	for _, l := range []struct {
		name string
		f    *linkFile
		dst  *Link
	}{{"intra", f.Intra, &c.Intra}, {"inter", f.Inter, &c.Inter}} {
		if l.f == nil {
			if !haveBase {
				return c, fmt.Errorf("plan: cluster file: [%s] is required (or give base)", l.name)
			}
			continue
		}
		if err := l.f.apply(l.name, l.dst, haveBase); err != nil {
			return c, err
		}
		if err := l.f.applyPolled(l.name, &c); err != nil {
			return c, err
		}
	}
	return c, nil
}

// applyPolled sets Cluster.PolledIntra from [intra]'s polled_ keys,
// which come together and only there.
func (l *linkFile) applyPolled(name string, c *Cluster) error {
	bw, lat := l.PolledBWGBps, l.PolledLatencyUS
	switch {
	case bw == nil && lat == nil:
		return nil
	case name != "intra":
		return fmt.Errorf("plan: cluster file: %s.polled_bw_gbps, polled_latency_us: only [intra] has them (a CPU host's ranks that poll)", name)
	case bw == nil || lat == nil:
		return fmt.Errorf("plan: cluster file: intra.polled_bw_gbps and intra.polled_latency_us: give both or neither")
	}
	c.PolledIntra = &Link{BW: *bw * giga, Latency: *lat * us}
	return nil
}

func pick(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return printable(v) // a file's name reaches the terminal
		}
	}
	return ""
}

func copyPeaks(m map[Precision]float64) map[Precision]float64 {
	out := make(map[Precision]float64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func (d *deviceFile) apply(a *Accel, haveBase bool) error {
	a.Name = pick(d.Name, a.Name, "device")
	req := []struct {
		key string
		v   *float64
	}{{"memory_gib", d.MemoryGiB}, {"mem_bw_gbps", d.MemBWGBps}}
	for _, r := range req {
		if r.v == nil && !haveBase {
			return fmt.Errorf("plan: cluster file: device.%s is required (or give base)", r.key)
		}
	}
	if d.MemoryGiB != nil {
		a.Memory = int64(*d.MemoryGiB * gib)
	}
	if d.Reserved != nil {
		a.Reserved = int64(*d.Reserved * gib)
	}
	if d.MemBWGBps != nil {
		a.MemBW = *d.MemBWGBps * giga
	}
	if d.PeakTFLOPs == nil && !haveBase {
		return fmt.Errorf("plan: cluster file: device.peak_tflops is required (or give base)")
	}
	if d.PeakTFLOPs != nil {
		a.Peak = map[Precision]float64{}
		for k, v := range d.PeakTFLOPs {
			var p Plan
			if err := p.Set("precision", k); err != nil {
				return fmt.Errorf("plan: cluster file: device.peak_tflops: %w", err)
			}
			a.Peak[p.Precision] = v * tera
		}
	}
	setF(&a.GEMMEff, d.GEMMEff, 1)
	setF(&a.GEMMKnee, d.GEMMKnee, 1)
	setF(&a.MemEff, d.MemEff, 1)
	setF(&a.ConvEff, d.ConvEff, 1)
	setF(&a.AttnNarrowEff, d.AttnNarrow, 1)
	setF(&a.RingAttnEff, d.RingEff, 1)
	setF(&a.RingTileGap, d.RingTileUS, us)
	setF(&a.KernelGap, d.KernelGap, us)
	if d.SMs != nil {
		a.SMs = *d.SMs
	}
	if d.Attention != nil {
		a.Attn = d.Attention.table()
	}
	if d.AttnEff != nil {
		a.AttnEff = *d.AttnEff
	} else if !haveBase || d.GEMMEff != nil {
		a.AttnEff = 0.7 * a.GEMMEff
	}
	return nil
}

func setF(dst *float64, v *float64, unit float64) {
	if v != nil {
		*dst = *v * unit
	}
}

func (l *linkFile) apply(name string, dst *Link, haveBase bool) error {
	if l.BWGBps == nil && !haveBase {
		return fmt.Errorf("plan: cluster file: %s.bw_gbps is required (or give base)", name)
	}
	setF(&dst.BW, l.BWGBps, giga)
	setF(&dst.Latency, l.LatencyUS, us)
	return nil
}

// applySoftware sets the software profile's keys the file gives.
func (f clusterFile) applySoftware(s *Software) {
	for _, b := range []struct {
		v   *bool
		dst *bool
	}{{f.TPGradOverlap, &s.TPGradOverlap}, {f.FlatRings, &s.FlatRings}, {f.ZeRO3Regather, &s.ZeRO3Regather},
		{f.PPBlockingP2P, &s.PPBlockingP2P}, {f.GradAccumPass, &s.GradAccumPass}, {f.ZeRO3BwdPost, &s.ZeRO3BackwardPost},
		{f.OpSAC, &s.OpSAC}, {f.FP32Params, &s.FP32Params}, {f.FP8CS, &s.FP8CurrentScaling},
		{f.MoEEPOverlap, &s.MoE.EPOverlap}, {f.MoEExpertLoop, &s.MoE.ExpertLoop}, {f.MoEFP8Dispatch, &s.MoE.FP8Dispatch}} {
		if b.v != nil {
			*b.dst = *b.v
		}
	}
	if f.ZeRO3Modules != nil {
		s.ZeRO3Modules = *f.ZeRO3Modules
	}
	if f.MoEDispatcher != nil {
		s.MoE.Dispatcher = *f.MoEDispatcher
	}
	if f.MoECommSMs != nil {
		s.MoE.CommSMs = *f.MoECommSMs
	}
	if f.MoEOverlapEff != nil {
		s.MoE.EPOverlapEff = *f.MoEOverlapEff
	}
}
