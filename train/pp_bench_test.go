package train

import (
	"context"
	"testing"

	"trellis/parallel/pp"
	"trellis/trace"
)

// BenchmarkPipelineBubble measures the bubble from the trace: pp=2 ranks
// (one thread each) run a 4-layer model of width 256 (stages of two blocks:
// the embedding and the head are a few percent), m = 8 micro-batches of 2
// sequences of 64 tokens per step, each boundary transfer delayed by link
// emulation (100 µs, 1 GB/s). The metric per schedule is the idle
// fraction of the pipeline span (the schedule, without the gradient
// reduction and the update) averaged over the ranks, the median over 10
// steps after the first and over 3 runs (the schedules alternate);
// replay-* is the same for the bubble the schedule's dependencies alone
// impose on the compute durations the trace measured (pp.Replay: no
// communication, waking or scheduling delays) and wire-* for those plus
// the emulated link (each message 100 µs + its bytes/1 GB/s, queued per
// direction), so wire − replay is what the link costs and idle − wire what
// the executor and the machine add; textbook-* are (p−1)/(m+p−1) for 1f1b and gpipe,
// (p−1)/(v·m+p−1) for interleaved (v = 2) and (p−1)/(3m+p−1) for zb-h1 at
// F = B = W.
//
//	go test ./train -run '^$' -bench PipelineBubble -benchtime 1x
func BenchmarkPipelineBubble(b *testing.B) {
	const p, m, steps = 2, 8, 11
	schedules := []struct {
		name, plan string
		textbook   float64
	}{
		{"1f1b", "pp=2,schedule=1f1b", float64(p-1) / float64(m+p-1)},
		{"gpipe", "pp=2,schedule=gpipe", float64(p-1) / float64(m+p-1)},
		{"interleaved", "pp=2,vpp=2,schedule=interleaved", float64(p-1) / float64(2*m+p-1)},
		{"zb-h1", "pp=2,schedule=zb-h1", float64(p-1) / float64(3*m+p-1)},
	}
	const reps = 3
	for i := 0; i < b.N; i++ {
		got, rpl, wir := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
		for rep := 0; rep < reps; rep++ {
			for _, s := range schedules {
				if idle, replay, wire, ok := bubbleRun(b, s.plan, p, m, steps); ok {
					got[s.name] = append(got[s.name], idle)
					rpl[s.name] = append(rpl[s.name], replay)
					wir[s.name] = append(wir[s.name], wire)
				}
			}
		}
		for _, s := range schedules {
			if len(got[s.name]) == 0 {
				b.Logf("%-12s not run (the plan does not accept it)", s.name)
				continue
			}
			idle, replay, wire := median(got[s.name]), median(rpl[s.name]), median(wir[s.name])
			b.ReportMetric(idle, "idle-"+s.name)
			b.ReportMetric(replay, "replay-"+s.name)
			b.ReportMetric(wire, "wire-"+s.name)
			b.ReportMetric(s.textbook, "textbook-"+s.name)
			b.Logf("%-12s idle %.3f (runs %.3f)  replay %.3f (runs %.3f)  wire %.3f (runs %.3f)  textbook %.3f",
				s.name, idle, got[s.name], replay, rpl[s.name], wire, wir[s.name], s.textbook)
		}
	}
}

// bubbleRun trains plan with a trace and returns the median over steps
// (the first dropped) of the ranks' mean idle fraction, measured,
// replayed, and replayed with the link.
func bubbleRun(b *testing.B, plan string, p, m, steps int) (idle, replay, wire float64, ok bool) {
	const micro, seq, hidden = 2, 64, 256
	j := benchJob(plan, 4, micro, micro*m, steps)
	j.Model.Hidden, j.Model.Heads, j.Model.SeqLen = hidden, 4, seq
	j.Parallel.LinkLatency, j.Parallel.LinkBandwidth = "100us", "1GB"
	w := pp.Wire{Latency: 100, Gap: micro * seq * hidden * 4 / 1000} // µs: fp32 boundary bytes at 1 GB/s
	ep, err := j.EnginePlan()
	if err != nil {
		return 0, 0, 0, false
	}
	dir := b.TempDir()
	if _, err := Run(context.Background(), Options{Job: j, Trace: dir}); err != nil {
		b.Fatal(err)
	}
	evs, err := trace.Read(dir + "/trace.json")
	if err != nil {
		b.Fatal(err)
	}
	s, err := pp.Build(pp.Config{Kind: pp.Kind(ep.Schedule), PP: ep.PP, VPP: ep.VPP, Micro: m})
	if err != nil {
		b.Fatal(err)
	}
	spans := trace.IdleSpans(evs, "pipeline") // ordered by rank, then time
	n := len(spans) / p
	var idles, replays, wires []float64
	for k := 1; k < n; k++ {
		var sum float64
		step := make([][]trace.Event, p)
		for r := 0; r < p; r++ {
			sp := spans[r*n+k]
			sum += sp.Idle
			for _, e := range evs {
				if e.Ph == "X" && e.PID == r && e.TID == int(trace.Compute) && e.TS >= sp.TS && e.TS < sp.TS+sp.Span {
					step[r] = append(step[r], e)
				}
			}
		}
		res, err := pp.Replay(s, step, pp.Wire{})
		if err != nil {
			b.Fatal(err)
		}
		wired, err := pp.Replay(s, step, w)
		if err != nil {
			b.Fatal(err)
		}
		idles, replays, wires = append(idles, sum/float64(p)), append(replays, res.MeanIdle()), append(wires, wired.MeanIdle())
	}
	return median(idles), median(replays), median(wires), true
}
