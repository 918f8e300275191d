package profile

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"trellis/comm/commbench"
	"trellis/comm/local"
	"trellis/ops"
	"trellis/plan"
)

// CommConfig is a collective benchmark's configuration.
type CommConfig = commbench.Config

// Link is a fitted α–β link.
type Link struct {
	Backend   string
	Ranks     int
	LatencyS  float64
	BWBytes   float64 // bytes per second
	RMS       float64 // relative RMS error of the fit
	Samples   []CommSample
	StreamGBs float64 // reference: one loopback TCP stream (tcp only)
}

// Result is everything Run measured and the planner parameters fitted
// from it.
type Result struct {
	CPU            string
	Cores          int
	MemTotalBytes  int64
	ISA            string
	Threads        int
	PeakFLOPs      float64 // fp32 FMA peak of one rank, FLOP/s
	GEMM           []GEMMSample
	GEMMEff        float64
	GEMMKnee       float64
	GEMMFitRMS     float64
	Attention      AttnSample
	AttnNarrow     *AttnSample    // head size 16 where the kernels tile only wider heads (nil: one path)
	Ring           RingSample     // one cp=2 rank's ring-attention tiles at Attention's shape
	AttnTable      plan.AttnTable // the engine's attention cores (measureAttnTable)
	Half           HalfSample     // 16-bit GEMMs against fp32's
	CoreRates      []CoreSample   // concurrent single-thread GEMM rates, 1..Cores+1 ranks
	CoreSpeedup    float64        // Speedup(Cores): what Cores concurrent ranks compute over one
	Memory         MemSample
	Links          []Link
	Handoff        *Handoff // all-reduces between computing goroutine ranks (local backend) whose waits block: the link the engine meets where its ranks outnumber the cores
	PolledHandoff  *Handoff // the same with the waits polling (local.PollFor): where they do not; nil where PollFor gives the profile's ranks none
	Quick          bool
	Took           time.Duration
	MeasuredAtUnix int64
}

// Run measures this machine. It takes under two minutes (Quick: under 30
// seconds) on a 2-core machine.
func Run(ctx context.Context, c Config) (*Result, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	start := time.Now()
	k, err := ops.New(ops.Config{Threads: c.threads(), ISA: c.ISA})
	if err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	prog := func(stage string, done, total int) {
		if c.Progress != nil {
			c.Progress(stage, done, total)
		}
	}
	r := &Result{CPU: cpuName(), Cores: runtime.NumCPU(), MemTotalBytes: memTotal(), ISA: k.ISA(), Threads: k.Threads(), Quick: c.Quick}
	prog("fma peak", 0, 1)
	peakD := 400 * time.Millisecond
	if c.Quick {
		peakD = 150 * time.Millisecond
	}
	r.PeakFLOPs = k.PeakGFLOPS(peakD) * 1e9
	if !(r.PeakFLOPs > 0) {
		return nil, fmt.Errorf("profile: the FMA peak of ISA %s measured 0", k.ISA())
	}
	if r.GEMM, err = measureGEMMs(ctx, c, k, func(d, t int) { prog("gemm", d, t) }); err != nil {
		return nil, err
	}
	for _, g := range r.GEMM {
		// No product can beat the FMA peak: one that does shows the peak's
		// timing was disturbed (another process took the core).
		r.PeakFLOPs = max(r.PeakFLOPs, g.FLOPs()/g.Seconds)
	}
	if r.GEMMEff, r.GEMMKnee, r.GEMMFitRMS, err = FitGEMM(r.GEMM, r.PeakFLOPs); err != nil {
		return nil, err
	}
	if r.CoreRates, err = measureCores(ctx, c, r.Cores, func(d, t int) { prog("cores", d, t) }); err != nil {
		return nil, err
	}
	r.CoreSpeedup = Speedup(r.CoreRates, r.Cores)
	prog("16-bit gemm", 0, 1)
	if r.Half, err = measureHalf(ctx, c, k); err != nil {
		return nil, err
	}
	prog("attention", 0, 1)
	if r.AttnTable, err = measureAttnTable(ctx, c, k); err != nil {
		return nil, err
	}
	if r.Attention, err = measureAttention(c, r.AttnTable, r.PeakFLOPs); err != nil {
		return nil, err
	}
	if r.AttnNarrow, err = measureNarrowAttention(k, r.AttnTable, r.PeakFLOPs, r.Attention); err != nil {
		return nil, err
	}
	prog("ring attention", 0, 1)
	if r.Ring, err = measureRing(ctx, c, k, r.PeakFLOPs, r.Attention); err != nil {
		return nil, err
	}
	prog("memory", 0, 1)
	if r.Memory, err = measureMemory(ctx, c, k); err != nil {
		return nil, err
	}
	for _, b := range c.Backends {
		prog("collectives "+b, 0, 1)
		l, err := measureLink(ctx, c, b)
		if err != nil {
			return nil, err
		}
		r.Links = append(r.Links, l)
		if b == "local" {
			prog("hand-off", 0, 1)
			n := c.ranks()
			h, err := measureHandoffOver(ctx, c, n, 0, l)
			if err != nil {
				return nil, err
			}
			r.Handoff = &h
			if poll := local.PollFor(n, runtime.GOMAXPROCS(0)); poll > 0 {
				ph, err := measureHandoffOver(ctx, c, n, poll, l)
				if err != nil {
					return nil, err
				}
				r.PolledHandoff = &ph
			}
		}
	}
	// The cores' speedup again, at the end: on a shared host another
	// process may hold a core through one measurement (a quick profile
	// at load 4 measured 1.00 where the steps minutes later reached 1.9);
	// the better of the two, count by count, is what the cores can do.
	again, err := measureCores(ctx, c, r.Cores, func(d, t int) { prog("cores", d, t) })
	if err != nil {
		return nil, err
	}
	for i := range r.CoreRates {
		r.CoreRates[i].GFLOPs = max(r.CoreRates[i].GFLOPs, again[i].GFLOPs)
	}
	r.CoreSpeedup = Speedup(r.CoreRates, r.Cores)
	r.Took, r.MeasuredAtUnix = time.Since(start), time.Now().Unix()
	return r, nil
}

// measureLink times all-reduce, reduce-scatter and all-gather on backend
// at the message sizes training uses, from the small ones a small model's
// per-layer buckets and its loss all-reduce send (where the fixed cost of a
// collective — the goroutines' hand-offs — dominates) to large ones, on
// groups of 2 and, for the local backend, of 4 goroutine ranks (more ranks
// than a 2-core host has cores: the hand-offs then wait for a core), and
// fits the planner's link to all of them.
func measureLink(ctx context.Context, c Config, backend string) (Link, error) {
	sizes := []int64{1 << 10, 16 << 10, 256 << 10, 4 << 20, 32 << 20}
	if c.Quick {
		sizes = []int64{4 << 10, 64 << 10, 4 << 20}
	}
	groups := []int{c.ranks()}
	if backend == "local" && c.Ranks == 0 && c.ranks() < 4 {
		groups = append(groups, 4)
	}
	l := Link{Backend: backend, Ranks: c.ranks()}
	for _, n := range groups {
		cc := CommConfig{Backend: backend, Ranks: n, Ops: []string{"allreduce", "reducescatter", "allgather"}, Sizes: sizes}
		if backend != "local" {
			cc = c.Procs(cc)
		}
		rep, err := commbench.Run(ctx, cc)
		if err != nil {
			return Link{}, fmt.Errorf("profile: collectives on %s: %w", backend, err)
		}
		l.StreamGBs = max(l.StreamGBs, rep.Reference.TCPStreamGBps)
		for _, row := range rep.Rows {
			l.Samples = append(l.Samples, CommSample{Op: row.Op, Ranks: row.Ranks, Bytes: row.Bytes, Seconds: row.TimeS})
		}
	}
	var err error
	l.LatencyS, l.BWBytes, l.RMS, err = FitLink(l.Samples)
	return l, err
}

// cpuName is the model name of /proc/cpuinfo, or the architecture.
func cpuName() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				return strings.TrimSpace(v)
			}
		}
	}
	return runtime.GOARCH
}

// memTotal is MemTotal of /proc/meminfo in bytes (0 where unknown).
func memTotal() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				if err == nil {
					return kb << 10
				}
			}
		}
	}
	return 0
}
