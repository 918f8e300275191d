package profile

import (
	"fmt"
	"io"
	"strings"
	"time"

	"trellis/plan"
)

// WriteTOML writes the result as a cluster file in the planner's format
// (plan.ParseClusterFile): one device per rank of Threads cores, as many
// per node as the cores allow, memory shared equally. [intra] is the link
// of the first intra-host backend measured, in Backends order: local
// (goroutine ranks in one process: trellis train without a launcher) or
// shm (processes over shared memory: a launched job's ranks on one host);
// the other, when measured too, is written as a comment to swap in.
// [inter] is the tcp backend's (processes over loopback: the best a
// network between hosts could do; a real network is slower — edit it).
// The raw measurements are written as comments.
func (r *Result) WriteTOML(w io.Writer) error {
	per := max(1, r.Cores/max(r.Threads, 1))
	memGiB := float64(r.MemTotalBytes) / float64(per) / (1 << 30)
	if memGiB <= 0 {
		memGiB = 1
	}
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	p("# Measured by `trellis profile` on %s (%s%s) in %s.", time.Unix(r.MeasuredAtUnix, 0).UTC().Format(time.RFC3339), r.CPU, quickNote(r.Quick), r.Took.Round(time.Second))
	p("# A device is one rank of %d kernel thread(s) (%s kernels); a node is this host.", r.Threads, r.ISA)
	p("name = %q", "this-host")
	p("devices_per_node = %d", per)
	p("engine_stash = true   # the ranks run the Trellis engine: its activation formula")
	p("cores = %d             # CPU cores the ranks share (the engine runs every rank of a local run on them)", r.Cores)
	rates := make([]string, len(r.CoreRates))
	for i, c := range r.CoreRates {
		rates[i] = fmt.Sprintf("%d: %.1f", c.Ranks, c.GFLOPs)
	}
	p("core_speedup = %.3f   # GEMM %dx%dx%d on 1..%d concurrent one-thread ranks, GFLOP/s in all: %s", max(r.CoreSpeedup, 1), coreShape().M, coreShape().N, coreShape().K, r.Cores+1, strings.Join(rates, ", "))
	p("")
	p("[device]")
	p("name = %q", fmt.Sprintf("%s, %d thread(s)", r.CPU, r.Threads))
	p("memory_gib = %.3f      # MemTotal %.2f GiB shared by %d devices", memGiB, float64(r.MemTotalBytes)/(1<<30), per)
	p("reserved_gib = 0")
	p("mem_bw_gbps = %.2f      # copy(): bytes read + written per second, 48 MiB buffers", r.Memory.CopyGBps)
	peak := r.PeakFLOPs / 1e12
	p("peak_tflops = { fp32 = %.4f, bf16 = %.4f, fp16 = %.4f }   # FMA loop; bf16, fp16: times their GEMMs' speed over fp32's on a small model's shapes (%.2fx, %.2fx)",
		peak, peak*r.Half.BF16Ratio(), peak*r.Half.F16Ratio(), r.Half.BF16Ratio(), r.Half.F16Ratio())
	p("gemm_efficiency = %.4f   # fit of η·m/(m+κ)·n/(n+κ)·k/(k+κ) to %d GEMMs, RMS error %.1f%%", r.GEMMEff, len(r.GEMM), 100*r.GEMMFitRMS)
	p("gemm_knee = %.2f", r.GEMMKnee)
	a := r.Attention
	p("attn_efficiency = %.4f   # flash attention B=%d T=%d C=%d NH=%d: fwd %.3g s, bwd %.3g s", clamp01(a.PlannerEffOut), a.B, a.T, a.C, a.NH, a.Fwd, a.Bwd)
	if n := r.AttnNarrow; n != nil {
		p("attn_narrow_efficiency = %.4f   # the same at head size %d (C=%d NH=%d): fwd %.3g s, bwd %.3g s; head sizes not a multiple of 32 run the kernels' blocked path", clamp01(n.PlannerEffOut), n.C/n.NH, n.C, n.NH, n.Fwd, n.Bwd)
	}
	for _, g := range r.Ring.Shapes {
		p("# ring-attention tiles (attention under cp), one cp=2 rank, B=%d T=%d C=%d NH=%d: %d tiles of %d rows, fwd %.3g s, bwd %.3g s", g.B, g.T, g.C, g.NH, g.Tiles, g.Tile, g.Fwd, g.Bwd)
	}
	p("ring_attn_efficiency = %.4f   # with ring_tile_us: F·4.125/(η·peak) + tiles·γ fitted to the timings above", clamp01(r.Ring.PlannerEffOut))
	p("ring_tile_us = %.3f", r.Ring.TileSeconds*1e6)
	p("mem_efficiency = %.4f    # a GPT layer's memory-bound forward (LayerNorm 4h : adds 6h : GELU 8h bytes a token) at %.2f GB/s of the copy's %.2f: LayerNorm %.2f, add %.2f, GELU %.2f GB/s",
		clamp01(r.Memory.KernelGBps/r.Memory.CopyGBps), r.Memory.KernelGBps, r.Memory.CopyGBps, r.Memory.NormGBps, r.Memory.AddGBps, r.Memory.ActGBps)
	if r.Memory.ConvertGBps > 0 {
		p("convert_efficiency = %.4f # the engine's fp32 -> bf16 -> fp32 conversion passes (16-bit plans) at %.2f GB/s", clamp01(r.Memory.ConvertGBps/r.Memory.CopyGBps), r.Memory.ConvertGBps)
	}
	p("kernel_gap_us = %.3f", r.Memory.GapSeconds*1e6)
	r.writeAttnTable(p)
	p("")
	p("# GEMM samples (m n k: GFLOP/s, fraction of peak):")
	for _, s := range r.GEMM {
		p("#   %5d %5d %5d: %7.1f  %.3f", s.M, s.N, s.K, s.FLOPs()/s.Seconds/1e9, s.Efficiency(r.PeakFLOPs))
	}
	intra, other := "local", "shm"
	for _, l := range r.Links { // in Backends order: the first intra-host one
		if l.Backend == "shm" || l.Backend == "local" {
			if l.Backend == "shm" {
				intra, other = "shm", "local"
			}
			break
		}
	}
	what := map[string]string{
		"local": "goroutine ranks in one process (comm/local)",
		"shm":   "processes on this host over shared memory (comm/shm)",
		"tcp":   "processes over loopback TCP (comm/tcp); a network between hosts is slower",
	}
	for _, sec := range []struct{ name, backend string }{{"intra", intra}, {"inter", "tcp"}} {
		l, ok := r.link(sec.backend)
		if !ok {
			l, ok = r.anyLink()
			if !ok {
				return fmt.Errorf("profile: no collective was measured: give at least one backend")
			}
			p("\n# [%s] not measured: copied from the %s backend", sec.name, l.Backend)
		}
		if h := r.Handoff; h != nil && l.Backend == "local" {
			// The engine's collectives come between computations: the
			// link that matters is the one they meet, not the hot
			// loop's.
			p("\n[%s]   # %s, %d ranks; α–β fit to %d all-reduces arriving from a GEMM (hand-offs between parked goroutines, buffers the GEMM evicted), RMS error %.1f%%: %s", sec.name, what[l.Backend], l.Ranks, len(h.Samples), 100*h.RMS, handoffList(h.Samples))
			p("bw_gbps = %.3f      # back to back (%d collectives, RMS error %.1f%%): %.3f, the ceiling", h.BWBytes/1e9, len(l.Samples), 100*l.RMS, l.BWBytes/1e9)
			p("latency_us = %.3f   # back to back: %.3f, the floor", h.LatencyS*1e6, l.LatencyS*1e6)
			if ph := r.PolledHandoff; ph != nil && sec.name == "intra" {
				p("# where the ranks' threads do not outnumber the cores their waits poll (comm/local PollFor): the same all-reduces polled, RMS error %.1f%%: %s", 100*ph.RMS, handoffList(ph.Samples))
				p("polled_bw_gbps = %.3f", ph.BWBytes/1e9)
				p("polled_latency_us = %.3f", ph.LatencyS*1e6)
			}
		} else {
			p("\n[%s]   # %s, %d ranks; α–β fit to %d collectives, RMS error %.1f%%", sec.name, what[l.Backend], l.Ranks, len(l.Samples), 100*l.RMS)
			p("bw_gbps = %.3f", l.BWBytes/1e9)
			p("latency_us = %.3f", l.LatencyS*1e6)
		}
		if l.StreamGBs > 0 && l.Backend == "tcp" {
			p("# one loopback TCP stream: %.2f GB/s", l.StreamGBs)
		}
		if o, ok := r.link(other); ok && sec.name == "intra" {
			p("# %s, %d ranks, measured too (%d collectives, RMS error %.1f%%); to plan for it instead:", what[o.Backend], o.Ranks, len(o.Samples), 100*o.RMS)
			p("#   bw_gbps = %.3f", o.BWBytes/1e9)
			p("#   latency_us = %.3f", o.LatencyS*1e6)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// handoffList is the hand-off's samples as "4 KiB 35.1 µs, …".
func handoffList(ss []CommSample) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = fmt.Sprintf("%d KiB %.1f µs", s.Bytes>>10, s.Seconds*1e6)
	}
	return strings.Join(parts, ", ")
}

func (r *Result) link(backend string) (Link, bool) {
	for _, l := range r.Links {
		if l.Backend == backend {
			return l, true
		}
	}
	return Link{}, false
}

func (r *Result) anyLink() (Link, bool) {
	if len(r.Links) == 0 {
		return Link{}, false
	}
	return r.Links[0], true
}

func quickNote(q bool) string {
	if q {
		return ", --quick"
	}
	return ""
}

func clamp01(x float64) float64 { return min(max(x, 0.001), 1) }

// writeAttnTable writes [device.attention]: the engine's attention cores
// in ns per causal score of one head (plan.AttnTable), rows by seq,
// columns by head size.
func (r *Result) writeAttnTable(p func(string, ...any)) {
	t := r.AttnTable
	if len(t.Seq) == 0 {
		return
	}
	ints := func(v []int) string {
		s := make([]string, len(v))
		for i, x := range v {
			s[i] = fmt.Sprint(x)
		}
		return "[" + strings.Join(s, ", ") + "]"
	}
	p("")
	p("[device.attention]   # the engine's attention cores, %d heads of one thread: ns per causal score T·(T+1)/2 of a head; rows seq, columns head", attnHeads)
	p("seq = %s", ints(t.Seq))
	p("head = %s", ints(t.Head))
	for k := range t.Cost {
		key := plan.AttnTableKey(k)
		rows := make([]string, len(t.Cost[k]))
		for i, row := range t.Cost[k] {
			v := make([]string, len(row))
			for j, x := range row {
				v[j] = fmt.Sprintf("%.3f", x*1e9)
			}
			rows[i] = "[" + strings.Join(v, ", ") + "]"
		}
		p("%s = [%s]", key, strings.Join(rows, ", "))
	}
}
