package main

import (
	"fmt"
	"strings"

	"trellis/parallel/pp"
	"trellis/plan"
)

// scheduleText is the pipeline schedule the engine runs for p with micro
// micro-batches per step (parallel/pp: the same lists, the same
// simulator), for trellis plan --explain: each rank's compute order when
// it is short enough to read, the simulated bubble at F = B = W and the
// micro-batches each rank keeps in flight. "" when p has no pipeline.
func scheduleText(p plan.Plan, micro int) string {
	if p.PP < 2 {
		return ""
	}
	if p.Schedule == plan.DualPipe { // dualpipev runs: its lists below
		return dualPipeText(p, micro)
	}
	s, err := pp.Build(pp.Config{Kind: pp.Kind(p.Schedule), PP: p.PP, VPP: p.VPP, Micro: micro})
	if err != nil {
		return fmt.Sprintf("\npipeline schedule: %v\n", err)
	}
	res, err := pp.Simulate(s, pp.Unit)
	if err != nil {
		return fmt.Sprintf("\npipeline schedule: %v\n", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\npipeline schedule the engine runs (parallel/pp): %s, pp=%d, vpp=%d, %d micro-batches per step\n",
		s.Kind, s.PP, max(s.VPP, 1), micro)
	fmt.Fprintf(&b, "  bubble at F = B = W: %.1f%% of the step; micro-batches in flight per rank: %v\n", 100*res.Bubble(), res.InFlight)
	if p.PP*micro*max(p.VPP, 1) <= 128 {
		for _, line := range strings.Split(strings.TrimSpace(s.Format()), "\n")[1:] {
			b.WriteString("  " + line + "\n")
		}
	}
	return b.String()
}

// dualPipeText is the bidirectional DualPipe as the planner models it (the
// engine does not run it): each rank's runs of steps from the reference
// implementation's structure and the chunks of activations it holds at its
// peak.
func dualPipeText(p plan.Plan, micro int) string {
	ranks, err := plan.DualPipeRanks(p.Schedule, p.PP, micro)
	if err != nil {
		return fmt.Sprintf("\npipeline schedule: %v\n", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\npipeline schedule (deepseek-ai/DualPipe's steps; the engine does not run it): %s, pp=%d, %d micro-batches per step\n", p.Schedule, p.PP, micro)
	b.WriteString("  F forward, B backward (z: weights deferred to a W), A+B two chunks of different micro-batches overlapped\n")
	var flights []string
	for _, runs := range ranks {
		f := plan.DualPipeFlight(runs)
		flights = append(flights, fmt.Sprintf("%d+%d", f[0], f[1]))
	}
	fmt.Fprintf(&b, "  chunks of activations held at the peak per rank (chunk 0 + chunk 1): %s\n", strings.Join(flights, " "))
	if p.PP <= 16 {
		for _, line := range strings.Split(strings.TrimSpace(plan.FormatDualPipe(ranks)), "\n") {
			b.WriteString("  " + line + "\n")
		}
	}
	return b.String()
}
