package train

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"trellis/parallel/pp"
	"trellis/trace"
)

// BenchmarkPipelineBubble measures the bubble from the trace: pp=2 ranks
// (one thread each) run a 4-layer model of width 512 (stages of two blocks:
// the embedding and the head are 1–2%), m = 8 micro-batches of 2
// sequences of 64 tokens per step, each boundary transfer delayed by link
// emulation (100 µs, 1 GB/s: 362 µs per 256 KiB activation). Two metrics
// per schedule, each the idle fraction 1 − compute/span of a step's
// pipeline phase (the schedule, without the gradient reduction and the
// update) averaged over the ranks,
// the median over 10 steps after the first and over 3 runs (the schedules
// alternate):
//
//   - idle-*: each rank's span is its own pipeline span, from its first
//     action to its last;
//   - step-idle-*: every rank's span is the step's pipeline span, from the
//     first rank's start to the last rank's end — the makespan the textbook
//     bubbles and Replay measure; a rank that finishes early (1F1B's last
//     stage, whose backwards end (p−1)(B+W) before the first stage's) idles
//     until the step's gradient reduction, which idle-* does not count.
//     So over own spans zb-h1/1f1b is at least (m+1)/(2m+1) (0.53 at m = 8)
//     even at F = B = W with no link and no noise (pp.TestOwnSpanBubble).
//
// Width 512 makes the passes ~11 ms (F ≈ B ≈ 1.2 W), so the link (362 µs
// per message) and the shared machine's millisecond-scale scheduling noise
// weigh a quarter of what they do at width 256 (BenchmarkPipelineBubbleNarrow).
//
// replay-* is step-idle-* for the bubble the schedule's dependencies alone
// impose on the compute durations the trace measured, in the order the
// ranks ran them (pp.Replay: no communication, waking or scheduling
// delays) and wire-* for those plus the emulated link (each message 100 µs
// + its bytes/1 GB/s, queued per direction), so wire − replay is what the
// link costs and step-idle − wire what the executor and the machine add;
// textbook-* are (p−1)/(m+p−1) for 1f1b and gpipe, (p−1)/(v·m+p−1) for
// interleaved (v = 2) and (p−1)/(3m+p−1) for zb-h1 at F = B = W;
// zb-h1/1f1b and step-zb-h1/1f1b the ratios of the medians. The log adds
// the mean F, B and W pass durations and the W's the executor ran ahead.
//
//	go test ./train -run '^$' -bench 'PipelineBubble$' -benchtime 1x
func BenchmarkPipelineBubble(b *testing.B) { pipelineBubble(b, 512, 3) }

// BenchmarkPipelineBubbleNarrow is BenchmarkPipelineBubble at width 256 over
// 5 runs (the benchmark's job until 2026-12-01: passes of ~3 ms, 231 µs
// per message).
//
//	go test ./train -run '^$' -bench PipelineBubbleNarrow -benchtime 1x
func BenchmarkPipelineBubbleNarrow(b *testing.B) { pipelineBubble(b, 256, 5) }

// BenchmarkPipelineBubblePP4 is BenchmarkPipelineBubbleNarrow at pp=4 over
// 8 blocks (a block a DualPipeV chunk, two a 1F1B stage), 1f1b, zb-h1 and
// dualpipev over 3 runs. On the 2-vCPU machine four ranks share two cores,
// so step-idle-* counts waits for a core too; replay-* and wire-* (the
// schedule's dependencies on the measured pass durations, without and with
// the link) are the schedule's own bubble.
//
//	go test ./train -run '^$' -bench 'PipelineBubblePP4$' -benchtime 1x
func BenchmarkPipelineBubblePP4(b *testing.B) {
	pipelineBubbleAt(b, 256, 3, 4, 8, "1f1b", "zb-h1", "dualpipev")
}

// pipelineBubble is BenchmarkPipelineBubble at width hidden over reps runs.
func pipelineBubble(b *testing.B, hidden, reps int) { pipelineBubbleAt(b, hidden, reps, 2, 4) }

// pipelineBubbleAt is pipelineBubble at pp = p over a model of the given
// layers, for the named schedules (none: all five).
func pipelineBubbleAt(b *testing.B, hidden, reps, p, layers int, only ...string) {
	const m, steps = 8, 11
	pf := func(s string) string { return fmt.Sprintf("pp=%d,%s", p, s) }
	schedules := []struct {
		name, plan string
		textbook   float64
	}{
		{"1f1b", pf("schedule=1f1b"), float64(p-1) / float64(m+p-1)},
		{"gpipe", pf("schedule=gpipe"), float64(p-1) / float64(m+p-1)},
		{"interleaved", pf("vpp=2,schedule=interleaved"), float64(p-1) / float64(2*m+p-1)},
		{"zb-h1", pf("schedule=zb-h1"), float64(p-1) / float64(3*m+p-1)},
		// per chunk (half a stage) F = B = W: (p−1)F idle in 6m + (p−1) chunk passes
		{"dualpipev", pf("schedule=dualpipev"), float64(p-1) / float64(6*m+p-1)},
	}
	if len(only) > 0 {
		schedules = slices.DeleteFunc(schedules, func(s struct {
			name, plan string
			textbook   float64
		}) bool {
			return !slices.Contains(only, s.name)
		})
	}
	for i := 0; i < b.N; i++ {
		runs := map[string][]bubbleResult{}
		for rep := 0; rep < reps; rep++ {
			for _, s := range schedules {
				if r, ok := bubbleRun(b, s.plan, hidden, layers, p, m, steps); ok {
					runs[s.name] = append(runs[s.name], r)
				}
			}
		}
		med := map[string]bubbleResult{}
		for _, s := range schedules {
			rs := runs[s.name]
			if len(rs) == 0 {
				b.Logf("%-12s not run (the plan does not accept it)", s.name)
				continue
			}
			col := func(f func(bubbleResult) float64) (float64, []float64) {
				var xs []float64
				for _, r := range rs {
					xs = append(xs, f(r))
				}
				return median(xs), xs
			}
			idle, idles := col(func(r bubbleResult) float64 { return r.idle })
			step, stepv := col(func(r bubbleResult) float64 { return r.step })
			replay, _ := col(func(r bubbleResult) float64 { return r.replay })
			wire, _ := col(func(r bubbleResult) float64 { return r.wire })
			f, _ := col(func(r bubbleResult) float64 { return r.f })
			bw, _ := col(func(r bubbleResult) float64 { return r.b })
			w, _ := col(func(r bubbleResult) float64 { return r.w })
			ahead, _ := col(func(r bubbleResult) float64 { return r.ahead })
			span, spans := col(func(r bubbleResult) float64 { return r.span })
			ranked, _ := col(func(r bubbleResult) float64 { return r.ranked })
			flat, _ := col(func(r bubbleResult) float64 { return r.flat })
			flatOwn, _ := col(func(r bubbleResult) float64 { return r.flatOwn })
			med[s.name] = bubbleResult{idle: idle, step: step}
			b.ReportMetric(idle, "idle-"+s.name)
			b.ReportMetric(step, "step-idle-"+s.name)
			b.ReportMetric(replay, "replay-"+s.name)
			b.ReportMetric(wire, "wire-"+s.name)
			b.ReportMetric(s.textbook, "textbook-"+s.name)
			b.ReportMetric(span, "step-ms-"+s.name)
			b.Logf("%-12s idle %.3f (runs %.3f)  step-idle %.3f (runs %.3f)  replay %.3f  wire %.3f  (at rank means %.3f, at means %.3f, own spans %.3f)  textbook %.3f  F %.2f B %.2f W %.2f ms, W's ahead %.1f, step %.1f ms (runs %.1f)",
				s.name, idle, idles, step, stepv, replay, wire, ranked, flat, flatOwn, s.textbook, f, bw, w, ahead, span, spans)
		}
		if a, v := med["1f1b"], med["dualpipev"]; a.step > 0 && v.step > 0 {
			b.ReportMetric(v.step/a.step, "step-dualpipev/1f1b")
		}
		if a, z := med["1f1b"], med["zb-h1"]; a.idle > 0 && a.step > 0 {
			b.ReportMetric(z.idle/a.idle, "zb-h1/1f1b")
			b.ReportMetric(z.step/a.step, "step-zb-h1/1f1b")
			var pairs []float64 // each run's ratio: the runs alternate, so a pair shares the machine's state
			for k := range min(len(runs["1f1b"]), len(runs["zb-h1"])) {
				pairs = append(pairs, runs["zb-h1"][k].step/runs["1f1b"][k].step)
			}
			b.Logf("step-zb-h1/1f1b of the medians %.3f; run by run %.3f", z.step/a.step, pairs)
		}
	}
}

// bubbleResult is one run's medians over its steps (the first dropped):
// the ranks' mean idle fraction over their own pipeline spans (idle), over
// the step's pipeline span (step), replayed, and replayed with the link;
// the mean F, B and W pass durations (ms; a fused backward counts as B),
// the W's run ahead per step and the step's pipeline span (ms).
type bubbleResult struct {
	idle, step, replay, wire, span float64
	f, b, w, ahead                 float64
	// ranked and flat are wire-* with every pass at its rank's mean
	// duration (the stages' imbalance, no pass-to-pass jitter) and at the
	// ranks' mean (neither); flatOwn is flat over the ranks' own spans.
	ranked, flat, flatOwn float64
}

// bubbleRun trains plan on a model of the given layers at width hidden
// with a trace and measures it (bubbleResult).
func bubbleRun(b *testing.B, plan string, hidden, layers, p, m, steps int) (bubbleResult, bool) {
	const micro, seq = 2, 64
	j := benchJob(plan, layers, micro, micro*m, steps)
	j.Model.Hidden, j.Model.Heads, j.Model.SeqLen = hidden, 4, seq
	j.Parallel.LinkLatency, j.Parallel.LinkBandwidth = "100us", "1GB"
	w := pp.Wire{Latency: 100, Gap: int64(micro * seq * hidden * 4 / 1000)} // µs: fp32 boundary bytes at 1 GB/s
	ep, err := j.EnginePlan()
	if err != nil {
		return bubbleResult{}, false
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
	var idles, stepIdles, replays, wires, stepSpans []float64
	sum, cnt := map[byte]float64{}, map[byte]float64{}
	type rop struct {
		r  int
		op byte
	}
	rsum, rcnt := map[rop]float64{}, map[rop]float64{}
	var ahead float64
	for k := 1; k < n; k++ {
		var own float64
		lo, hi := spans[k].TS, spans[k].TS+spans[k].Span
		step := make([][]trace.Event, p)
		for r := 0; r < p; r++ {
			sp := spans[r*n+k]
			own += sp.Idle
			lo, hi = min(lo, sp.TS), max(hi, sp.TS+sp.Span)
			for _, e := range evs {
				if e.Ph == "X" && e.PID == r && e.TID == int(trace.Compute) && e.TS >= sp.TS && e.TS < sp.TS+sp.Span {
					step[r] = append(step[r], e)
					sum[e.Name[0]] += float64(e.Dur) / 1000
					cnt[e.Name[0]]++
					rsum[rop{r, e.Name[0]}] += float64(e.Dur)
					rcnt[rop{r, e.Name[0]}]++
					if strings.HasPrefix(e.Name, "W") && e.Args["ahead"] == true {
						ahead++
					}
				}
			}
		}
		var common float64
		for r := 0; r < p; r++ {
			common += 1 - float64(spans[r*n+k].Busy)/float64(hi-lo)
		}
		res, err := pp.Replay(s, step, pp.Wire{})
		if err != nil {
			b.Fatal(err)
		}
		wired, err := pp.Replay(s, step, w)
		if err != nil {
			b.Fatal(err)
		}
		idles, stepIdles = append(idles, own/float64(p)), append(stepIdles, common/float64(p))
		stepSpans = append(stepSpans, float64(hi-lo)/1000)
		replays, wires = append(replays, res.MeanIdle()), append(wires, wired.MeanIdle())
	}
	mean := func(op byte) float64 {
		if cnt[op] == 0 {
			return 0
		}
		return sum[op] / cnt[op]
	}
	at := func(dur func(r int, op byte) float64) pp.Result {
		res, err := pp.SimulateLink(s, func(r int, a pp.Action) int64 {
			if !a.Op.Compute() {
				return 0
			}
			return int64(dur(r, a.Op.String()[0]))
		}, w)
		if err != nil {
			b.Fatal(err)
		}
		return res
	}
	ranked := at(func(r int, op byte) float64 { return rsum[rop{r, op}] / max(rcnt[rop{r, op}], 1) }).MeanIdle()
	flat := at(func(_ int, op byte) float64 { return 1000 * mean(op) })
	return bubbleResult{idle: median(idles), step: median(stepIdles), replay: median(replays), wire: median(wires), span: median(stepSpans),
		f: mean('F'), b: mean('B'), w: mean('W'), ahead: ahead / float64(n-1),
		ranked: ranked, flat: flat.MeanIdle(), flatOwn: flat.MeanOwnIdle()}, true
}
