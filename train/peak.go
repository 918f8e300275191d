package train

import (
	"fmt"
	"runtime"

	"trellis/internal/bounded"
	"trellis/ops"
	"trellis/plan"
)

// MFU's denominator is one stated peak, never measured inside a run: a
// rank measuring its cores under whatever load there is divides the same
// tokens/s by a different number each run (MFU above 100% when the
// measurement ran slow) and moves every prediction with it. The peak is
// the cluster file's (parallel.cluster, or the profile `trellis profile
// --cache` kept, which cmd/trellis sets as parallel.cluster), else the
// built-in figure for the kernels' ISA (builtinCorePeak).

// builtinCorePeak is one core's peak FLOP/s for the kernels' ISA and the
// precision, when no cluster file states one: two FMA pipes of 16
// (avx512) or 8 (avx2) fp32 lanes, 2 FLOPs per lane, at 3.7 GHz — 236.8
// and 118.4 GFLOP/s, above every CPU measured here (docs/BENCHMARKS.md:
// 100–210 with AVX-512) but an Intel Xeon's FMA loop at 246.7
// (2026-12-04), whose training steps reach 0.67 of the figure and its
// lone GEMMs 0.96, so MFU stays below 100%; generic Go kernels: 4
// lanes. bf16 GEMMs on AVX-512 (vdpbf16ps) do twice the fp32 FLOPs per
// instruction; fp16 is widened to fp32.
func builtinCorePeak(isa string, p plan.Precision) float64 {
	lanes := 4.0
	switch isa {
	case "avx512":
		lanes = 16
	case "avx2":
		lanes = 8
	}
	f := 2 * lanes * 2 * 3.7e9
	if p == plan.BF16 && isa == "avx512" {
		f *= 2
	}
	return f
}

// statedPeak is one core's peak FLOP/s for precision p and where it comes
// from: the cluster file's peak_tflops (per device; a profile's device is
// one rank of devices_per_node·threads = cores, so per core it is the
// device's times devices_per_node over cores), else the built-in figure.
func (j Job) statedPeak(p plan.Precision) (float64, string, error) {
	if f := j.Parallel.Cluster; f != "" {
		b, err := bounded.ReadFile(f, bounded.Config, "cluster file")
		if err != nil {
			return 0, "", fmt.Errorf("parallel.cluster=%q: %w", f, err)
		}
		c, err := plan.ParseClusterFile(b)
		if err != nil {
			return 0, "", fmt.Errorf("parallel.cluster=%q: %w", f, err)
		}
		key := p
		pk := c.Accel.Peak[key]
		if !(pk > 0) {
			key, pk = plan.FP32, c.Accel.Peak[plan.FP32]
		}
		if !(pk > 0) {
			return 0, "", fmt.Errorf("parallel.cluster=%q: no peak_tflops for %s or fp32", f, p)
		}
		if c.Cores > 0 {
			pk = pk * float64(c.DevicesPerNode) / float64(c.Cores)
		}
		return pk, fmt.Sprintf("%s peak_tflops of cluster file %s", key, f), nil
	}
	isa := "generic"
	if k, err := ops.New(ops.Config{Threads: 1}); err == nil {
		isa = k.ISA()
	}
	return builtinCorePeak(isa, p), fmt.Sprintf("built-in %s figure for %s kernels (train.builtinCorePeak)", p, isa), nil
}

// runPeak is the FLOP/s of the cores s's ranks use (ranks × threads, at
// most the CPUs) at the stated peak of the plan's precision, and its
// source: MFU's denominator, and the built-in estimate's peak.
func (j Job) runPeak(s settings) (float64, string, error) {
	core, src, err := j.statedPeak(s.enginePlan.Precision)
	if err != nil {
		return 0, "", err
	}
	cores := min(s.ranks*s.threads, runtime.NumCPU())
	return core * float64(cores), fmt.Sprintf("%.1f GFLOP/s = %d core(s) × %.1f, the %s", core*float64(cores)/1e9, cores, core/1e9, src), nil
}
