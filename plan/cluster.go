package plan

import (
	"fmt"
	"math"
	"strings"
)

// Accel describes one device (a GPU, or a CPU core used as a rank).
// Bandwidths are bytes per second, times seconds, FLOP rates FLOP/s.
type Accel struct {
	Name string
	// Peak is the dense peak FLOP/s of matrix products per precision; a
	// precision the device lacks (fp8 on an A100) is absent or 0. For fp32 it
	// is the rate fp32 training's matrix products run at (TF32 tensor cores
	// on NVIDIA parts since Ampere).
	Peak map[Precision]float64
	// Memory is the device's memory in bytes (as the driver reports it).
	Memory int64
	// Reserved is memory the runtime holds outside the training state: the
	// CUDA context, library workspaces and communicator buffers.
	Reserved int64
	// MemBW is the peak memory bandwidth.
	MemBW float64
	// GEMMEff is the fraction of Peak the largest matrix products reach
	// (a tuned library on a square 8192 GEMM); GEMMKnee is the dimension at
	// which a GEMM's efficiency is half of that along that dimension (tile
	// and pipeline fill effects, see gemmEfficiency).
	GEMMEff  float64
	GEMMKnee float64
	// AttnEff is the fraction of Peak a fused (flash) attention kernel
	// reaches in its forward pass; its backward runs at 80% of that.
	AttnEff float64
	// AttnNarrowEff is AttnEff for the Trellis engine's flash kernels at a
	// head size they cannot tile (FlashHeadTiled false: AVX-512's tiled
	// path reads its operands in whole 32-column tiles; other head sizes
	// take the blocked path, measured at 0.2–0.45 of peak against the
	// tiled 0.8–0.9 at head size 64); 0: AttnEff. Engine clusters only.
	AttnNarrowEff float64
	// RingAttnEff is the fraction of Peak the attention core reaches under
	// context parallelism, forward (the backward at 80% of that), where it
	// runs as ring attention's per-block kernels: on the Trellis engine
	// ops.AttentionTileForward/Backward, tiles of s/(2·cp) rows, which
	// need not run at the flash kernel's rate. 0: AttnEff (GPU stacks run
	// the ring's blocks with their flash kernels; see ringAttnEff).
	RingAttnEff float64
	// RingTileGap is the fixed cost of one ring-attention tile, forward
	// and backward together (seconds: the tile's seven small products'
	// set-up and its row loops), paid per tile beside its FLOPs at
	// RingAttnEff; 0: none (see attentionCore).
	RingTileGap float64
	// Attn is the Trellis engine's attention cores measured over sequence
	// lengths and head sizes (`trellis profile`: [device.attention]); on
	// an engine cluster it prices the attention core at the head sizes it
	// covers (AttnTable.Covers), without cp, in place of AttnEff and the
	// materialising core's GEMMs and memory passes (attentionCore). nil:
	// the efficiency model.
	Attn *AttnTable
	// MemEff is the fraction of MemBW memory-bound kernels reach.
	MemEff float64
	// ConvEff is the fraction of MemBW the Trellis engine's 16-bit
	// conversion passes reach (rounding fp32 to bf16 and widening it
	// back: a copy that narrows or widens, faster than the norms and
	// activations MemEff prices); 0: MemEff. Only the engine's host
	// model uses it (engineHalfCompute, engineHalfFetch).
	ConvEff float64
	// KernelGap is the idle time between two dependent kernels (launch
	// latency not hidden by asynchronous launch).
	KernelGap float64
	// SMs is the device's streaming multiprocessors (0: not given). A
	// communication kernel that holds some of them while it overlaps
	// compute slows that compute (Software.MoE.CommSMs).
	SMs int
}

// Link is one class of interconnect, per device and per direction.
type Link struct {
	BW      float64 // achievable bus bandwidth per device, bytes/s (what nccl-tests' busbw reaches)
	Latency float64 // per message step, seconds (the α of the α–β model)
}

// Cluster is a machine of identical nodes.
type Cluster struct {
	Name           string
	Accel          Accel
	DevicesPerNode int
	Intra          Link // between devices of one node (NVLink/NVSwitch, shared memory)
	Inter          Link // between nodes, per device (one NIC rail per GPU on DGX systems)
	// TPCommOverlap: the training stack on this machine pipelines the
	// tensor-parallel all-gathers and reduce-scatters of sequence
	// parallelism with their GEMMs (Megatron-Core --tp-comm-overlap on
	// Transformer Engine's userbuffers, the default of NVIDIA's Hopper
	// recipes). Without it (the Megatron-LM of the A100 era) every
	// tensor-parallel collective is exposed. See layerComm.
	TPCommOverlap bool
	// EngineStash: the ranks run the Trellis engine (a CPU host), so the
	// activations of the plans it runs as its stash formula says
	// (engineActivations), not as Megatron's layers keep them.
	EngineStash bool
	// Software is the rest of what the training stack does with the
	// plan's communication (software.go).
	Software Software
	// Cores is the CPU cores of a node that its devices share (a CPU host
	// whose ranks are threads: `trellis profile` writes the count); 0 for
	// devices with their own compute (GPUs). CoreSpeedup is what Cores
	// threads computing at once reach over one (measured: 2 on two whole
	// cores, less on SMT siblings or a loaded host). See hostTime.
	Cores       int
	CoreSpeedup float64
	// OwnLinks are a CPU host's own intra- and inter-node links where its
	// ranks emulate Intra and Inter over them (comm/local's link
	// emulation, train's parallel.link_*): the emulated wire time is a
	// sleep that needs no core, the own links' cost (the hand-off) needs
	// one (busyHost). nil: no emulation.
	OwnLinks *[2]Link
	// PolledIntra is the intra-node link (or, under emulation, the own
	// one) where a CPU host's ranks poll their waits: the engine's
	// comm/local does where the ranks' threads do not outnumber the
	// cores (local.PollFor), and no sleeping core is woken per
	// collective (the profile's hand-off measured polled, `[intra]
	// polled_*`). nil: Intra for every job. Job.polledHost applies it.
	PolledIntra *Link
}

// Validate names the first field that breaks a rule.
func (c Cluster) Validate() error {
	a := c.Accel
	pos := []struct {
		k string
		v float64
	}{{"devices_per_node", float64(c.DevicesPerNode)}, {"device.memory", float64(a.Memory)},
		{"device.mem_bw", a.MemBW}, {"device.gemm_efficiency", a.GEMMEff}, {"device.attn_efficiency", a.AttnEff},
		{"device.mem_efficiency", a.MemEff}, {"intra.bw", c.Intra.BW}, {"inter.bw", c.Inter.BW}}
	for _, p := range pos {
		if !(p.v > 0) || math.IsInf(p.v, 1) {
			return fmt.Errorf("plan: cluster %s: %s=%g: must be positive and finite", c.Name, p.k, p.v)
		}
	}
	for _, p := range []struct {
		k string
		v float64
	}{{"device.gemm_efficiency", a.GEMMEff}, {"device.attn_efficiency", a.AttnEff}, {"device.mem_efficiency", a.MemEff}} {
		if p.v > 1 {
			return fmt.Errorf("plan: cluster %s: %s=%g: a fraction of peak is at most 1", c.Name, p.k, p.v)
		}
	}
	nonneg := []struct {
		k string
		v float64
	}{{"device.reserved", float64(a.Reserved)}, {"device.gemm_knee", a.GEMMKnee}, {"device.kernel_gap", a.KernelGap},
		{"intra.latency", c.Intra.Latency}, {"inter.latency", c.Inter.Latency}}
	for _, p := range nonneg {
		if !(p.v >= 0) || math.IsInf(p.v, 1) {
			return fmt.Errorf("plan: cluster %s: %s=%g: must be finite and not negative", c.Name, p.k, p.v)
		}
	}
	if a.Reserved >= a.Memory {
		return fmt.Errorf("plan: cluster %s: device.reserved=%d: must be less than device.memory=%d", c.Name, a.Reserved, a.Memory)
	}
	for _, p := range []Precision{FP32, BF16, FP16, FP8} {
		if v := a.Peak[p]; !(v >= 0) || math.IsInf(v, 1) {
			return fmt.Errorf("plan: cluster %s: device.peak_tflops.%s=%g: must be finite and not negative", c.Name, p, v/tera)
		}
	}
	if c.Cores < 0 || c.Cores > 1<<20 {
		return fmt.Errorf("plan: cluster %s: cores=%d: must be between 0 (devices do not share cores) and 1048576", c.Name, c.Cores)
	}
	if c.Cores > 0 && !(c.CoreSpeedup >= 1 && c.CoreSpeedup <= float64(c.Cores)) {
		return fmt.Errorf("plan: cluster %s: core_speedup=%g: must be between 1 and cores=%d", c.Name, c.CoreSpeedup, c.Cores)
	}
	if err := c.validRanges(); err != nil {
		return err
	}
	if err := c.Software.validate(c.Name); err != nil {
		return err
	}
	if n := c.Software.MoE.CommSMs; n > 0 && (a.SMs == 0 || n >= a.SMs) {
		return fmt.Errorf("plan: cluster %s: moe_comm_sms=%d: must be fewer than device.sms=%d (give the device's sms)", c.Name, n, a.SMs)
	}
	if a.Memory > 1<<50 {
		return fmt.Errorf("plan: cluster %s: device.memory=%d: more than a PiB per device", c.Name, a.Memory)
	}
	if len(c.supported()) == 0 {
		return fmt.Errorf("plan: cluster %s: device.peak_tflops: no precision has a positive peak", c.Name)
	}
	return nil
}

// validRanges bounds the numbers that divide or multiply costs, so that
// every prediction is finite: a bandwidth of 1e-300 GB/s is positive but
// makes a step time of +Inf. The bounds are far outside any real machine
// (a CPU core, a 1 Gb/s link) and name the file's key and unit.
func (c Cluster) validRanges() error {
	a := c.Accel
	rs := []bound{
		{"intra.bw_gbps", c.Intra.BW / giga, 1e-3, 1e6, "between 0.001 (1 MB/s) and 1e6"},
		{"inter.bw_gbps", c.Inter.BW / giga, 1e-3, 1e6, "between 0.001 (1 MB/s) and 1e6"},
		{"device.mem_bw_gbps", a.MemBW / giga, 1e-3, 1e6, "between 0.001 (1 MB/s) and 1e6"},
		{"intra.latency_us", c.Intra.Latency / us, 0, 1e6, "at most 1e6 (one second)"},
		{"inter.latency_us", c.Inter.Latency / us, 0, 1e6, "at most 1e6 (one second)"},
		{"device.kernel_gap_us", a.KernelGap / us, 0, 1e6, "at most 1e6 (one second)"},
		{"device.ring_tile_us", a.RingTileGap / us, 0, 1e6, "between 0 and 1e6 (one second)"},
		{"device.gemm_knee", a.GEMMKnee, 0, 1e6, "at most 1e6"},
		{"device.sms", float64(a.SMs), 0, 1e5, "between 0 (not given) and 100000"},
		{"device.gemm_efficiency", a.GEMMEff, 1e-4, 1, "between 0.0001 and 1"},
		{"device.attn_efficiency", a.AttnEff, 1e-4, 1, "between 0.0001 and 1"},
		{"device.mem_efficiency", a.MemEff, 1e-4, 1, "between 0.0001 and 1"},
		{"device.convert_efficiency", a.ConvEff, 0, 1, "0 (mem_efficiency's) or at most 1"},
		{"device.attn_narrow_efficiency", a.AttnNarrowEff, 0, 1, "0 (attn_efficiency's) or at most 1"},
		{"device.memory_gib", float64(a.Memory) / gib, 1.0 / 1024, 1 << 20, "between 1/1024 (1 MiB) and 1048576 (1 PiB)"},
	}
	if l := c.PolledIntra; l != nil {
		rs = append(rs, bound{"intra.polled_bw_gbps", l.BW / giga, 1e-3, 1e6, "between 0.001 (1 MB/s) and 1e6"},
			bound{"intra.polled_latency_us", l.Latency / us, 0, 1e6, "at most 1e6 (one second)"})
	}
	for _, p := range []Precision{FP32, BF16, FP16, FP8} {
		if v := a.Peak[p]; v != 0 {
			rs = append(rs, bound{"device.peak_tflops." + string(p), v / tera, 1e-6, 1e6, "0 (absent) or between 1e-6 (1 MFLOP/s) and 1e6"})
		}
	}
	for _, r := range rs {
		if !(r.v >= r.lo && r.v <= r.hi) {
			return fmt.Errorf("plan: cluster %s: %s=%g: must be %s", c.Name, r.k, r.v, r.rule)
		}
	}
	if a.Attn != nil {
		if err := a.Attn.Validate("device.attention"); err != nil {
			return fmt.Errorf("plan: cluster %s: %w", c.Name, err)
		}
	}
	if v := a.RingAttnEff; v != 0 && !(v >= 1e-4 && v <= 1) {
		return fmt.Errorf("plan: cluster %s: device.ring_attn_efficiency=%g: must be 0 (absent: attn_efficiency) or between 0.0001 and 1", c.Name, v)
	}
	return nil
}

// bound is a field's value (in the cluster file's unit) and its range.
type bound struct {
	k         string
	v, lo, hi float64
	rule      string
}

// supported lists the precisions the device has a peak for.
func (c Cluster) supported() []Precision {
	var ps []Precision
	for _, p := range []Precision{BF16, FP16, FP8, FP32} {
		if c.Accel.Peak[p] > 0 {
			ps = append(ps, p)
		}
	}
	return ps
}

const (
	gib  = 1 << 30
	mib  = 1 << 20
	tera = 1e12
	giga = 1e9
	us   = 1e-6
)

func peaks(fp32, bf16, fp8 float64) map[Precision]float64 {
	m := map[Precision]float64{FP32: fp32 * tera, BF16: bf16 * tera, FP16: bf16 * tera}
	if fp8 > 0 {
		m[FP8] = fp8 * tera
	}
	return m
}

// clusterPresets are DGX-class nodes: 8 GPUs on an NVSwitch, one InfiniBand
// rail per GPU. Peaks are NVIDIA's dense (no sparsity) figures; memory is
// what nvidia-smi reports; link bandwidths are the bus bandwidths NCCL
// reaches (about 77-82% of the NVLink line rate per direction, about 90% of
// the NIC's), latencies per ring step. docs/PLANNER.md gives the sources.
func clusterPresets() []Cluster {
	a100 := Accel{Name: "A100-SXM4-80GB", Peak: peaks(156, 312, 0), Memory: 81920 * mib, Reserved: 3 * gib / 2,
		MemBW: 2039 * giga, GEMMEff: 0.72, GEMMKnee: 96, AttnEff: 0.60, MemEff: 0.80, KernelGap: 2 * us, SMs: 108}
	h100 := Accel{Name: "H100-SXM5-80GB", Peak: peaks(494.7, 989.4, 1978.9), Memory: 81559 * mib, Reserved: 3 * gib / 2,
		MemBW: 3350 * giga, GEMMEff: 0.60, GEMMKnee: 128, AttnEff: 0.50, MemEff: 0.80, KernelGap: 2 * us, SMs: 132}
	h200 := h100
	h200.Name, h200.Memory, h200.MemBW = "H200-SXM5-141GB", 143771*mib, 4800*giga
	a100s := a100
	a100s.Name, a100s.Memory, a100s.MemBW = "A100-SXM4-40GB", 40960*mib, 1555*giga
	// The Hopper presets' published runs use Megatron-Core, whose
	// tensor-parallel backward is asynchronous (Software.TPGradOverlap).
	megatronCore := Software{TPGradOverlap: true, FlatRings: true}
	nccl := Software{FlatRings: true}
	return []Cluster{
		{Name: "dgx-a100", Accel: a100, DevicesPerNode: 8, Software: nccl,
			Intra: Link{BW: 230 * giga, Latency: 4 * us}, Inter: Link{BW: 23 * giga, Latency: 8 * us}},
		{Name: "dgx-a100-40gb", Accel: a100s, DevicesPerNode: 8, Software: nccl,
			Intra: Link{BW: 230 * giga, Latency: 4 * us}, Inter: Link{BW: 23 * giga, Latency: 8 * us}},
		{Name: "dgx-h100", Accel: h100, DevicesPerNode: 8, TPCommOverlap: true, Software: megatronCore,
			Intra: Link{BW: 360 * giga, Latency: 4 * us}, Inter: Link{BW: 45 * giga, Latency: 8 * us}},
		{Name: "dgx-h200", Accel: h200, DevicesPerNode: 8, TPCommOverlap: true, Software: megatronCore,
			Intra: Link{BW: 360 * giga, Latency: 4 * us}, Inter: Link{BW: 45 * giga, Latency: 8 * us}},
	}
}

// ClusterPreset returns a built-in cluster by name.
func ClusterPreset(name string) (Cluster, error) {
	var names []string
	for _, c := range clusterPresets() {
		if c.Name == name {
			return c, nil
		}
		names = append(names, c.Name)
	}
	return Cluster{}, fmt.Errorf("plan: no cluster preset %q (have %s)", name, strings.Join(names, ", "))
}

// ClusterPresetNames lists the built-in clusters.
func ClusterPresetNames() []string {
	var names []string
	for _, c := range clusterPresets() {
		names = append(names, c.Name)
	}
	return names
}
