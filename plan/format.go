package plan

import (
	"fmt"
	"strings"
	"text/tabwriter"
)

// Table renders a search result for people: the job, the ranked plans with
// their memory and time breakdowns and MFU, and the rejection counts.
func (j Job) Table(r Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "model    %s\n", j.Model)
	fmt.Fprintf(&b, "cluster  %s: %d × %s (%d per node, %s each)\n", j.Cluster.Name, j.Devices,
		j.Cluster.Accel.Name, j.Cluster.DevicesPerNode, Bytes(j.Cluster.Accel.Memory))
	fmt.Fprintf(&b, "job      seq %d, global batch %d sequences (%d tokens)\n\n", j.Seq, j.GlobalBatch, j.Seq*j.GlobalBatch)
	if len(r.Plans) == 0 {
		b.WriteString("no plan fits.\n")
		if sm := r.Smallest; sm.Memory.Total > 0 {
			fmt.Fprintf(&b, "the smallest, %s, %s\n", sm.Plan.Short(), sm.Why())
		}
	} else {
		j.planRows(&b, r.Plans)
	}
	fmt.Fprintf(&b, "\nconsidered %d candidates (%d complete plans costed), %d fit in %s", r.Candidates(), r.Evaluated, r.Fitting, Bytes(j.Cluster.Accel.Memory))
	if len(r.Rejected) > 0 {
		b.WriteString("; rejected:\n")
		for _, k := range r.RejectedReasons() {
			fmt.Fprintf(&b, "  %9d  %s\n", r.Rejected[k], k)
		}
	} else {
		b.WriteString("\n")
	}
	return b.String()
}

// planRows writes the ranked plans: a table of times and memory (in the
// unit of the largest total), then each plan's text and its variants.
func (j Job) planRows(b *strings.Builder, plans []Estimate) {
	var most int64
	for _, e := range plans {
		most = max(most, e.Memory.Total)
	}
	unit, div := byteUnit(most)
	st, sdiv := secondUnit(plans[0].Time.Step)
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "#\tstep %s\tcompute\tcomm\tbubble\tmisc\tMFU\tHFU\tTFLOP/s\ttokens/s\tmem %s\tparam\tgrad\toptim\tact\tother\t\n", st, unit)
	mem := func(v int64) float64 { return float64(v) / div }
	for i, e := range plans {
		m, t := e.Memory, e.Time
		fmt.Fprintf(tw, "%d\t%.4g\t%.4g\t%.4g\t%.4g\t%.4g\t%.1f%%\t%.1f%%\t%.4g\t%.4g\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t\n",
			i+1, t.Step/sdiv, t.Compute/sdiv, t.CommExposed/sdiv, t.Bubble/sdiv, t.Misc/sdiv, 100*e.MFU, 100*e.HFU, e.TFLOPsPerDevice,
			e.TokensPerS, mem(m.Total), mem(m.Param), mem(m.Grad), mem(m.Optim), mem(m.Act), mem(m.Other))
	}
	tw.Flush()
	b.WriteString("\n")
	for i, e := range plans {
		fmt.Fprintf(b, "%d  %s\n", i+1, e.Plan.Short())
		if n := e.VariantNote(); n != "" {
			fmt.Fprintf(b, "   the same within 0.05%%: %s\n", n)
		}
		if r := j.FP8Recipe(e.Plan); r != "" {
			fmt.Fprintf(b, "   fp8 recipe assumed: %s\n", r)
		}
		if n := j.EngineNote(e.Plan); n != "" {
			fmt.Fprintf(b, "   %s\n", n)
		}
	}
}

// Explain says, in numbers, what p costs and why it is rejected or slower
// than best (best may be nil).
func (j Job) Explain(p Plan, best *Estimate) string {
	var b strings.Builder
	fmt.Fprintf(&b, "plan %s\n", p)
	if err := j.Check(p); err != nil {
		fmt.Fprintf(&b, "rejected: %v\n", err)
		return b.String()
	}
	if r := j.EngineRefusals(p); j.Cluster.EngineStash && len(r) > 0 {
		fmt.Fprintf(&b, "rejected: the cluster's ranks run the Trellis engine (engine_stash), which does not run it: %s\n", strings.Join(r, "; "))
		return b.String()
	} else if n := j.EngineNote(p); n != "" {
		fmt.Fprintf(&b, "engine: %s\n", n)
	}
	if r := j.FP8Recipe(p); r != "" {
		fmt.Fprintf(&b, "fp8 recipe assumed: %s\n", r)
	}
	if j.useGeneral(p) {
		j.explainGeneral(&b, p, best)
		return b.String()
	}
	e := j.estimate(p, place(p, j.Cluster.DevicesPerNode))
	j.explainMemory(&b, e)
	j.explainTime(&b, e)
	if best != nil {
		explainVersus(&b, e, *best)
	}
	return b.String()
}

func (j Job) explainMemory(b *strings.Builder, e Estimate) {
	m, p := e.Memory, e.Plan
	if m.Fits() {
		fmt.Fprintf(b, "fits: %s of %s on stage %d (the most loaded device), %s of headroom\n", Bytes(m.Total), Bytes(m.Budget), m.Stage, Bytes(m.Budget-m.Total))
	} else {
		fmt.Fprintf(b, "rejected: %s\n", e.Why())
	}
	P := j.stageParams(p, m.Stage)
	shards := p.DP * p.CP
	w, g, k := weightBytes(p.Precision), gradBytes(p.Precision), optimBytes(p.Precision)
	fmt.Fprintf(b, "  parameters  %10s  %.4g params on the stage (%d layers) × %g B%s\n", Bytes(m.Param), P, m.Layers, w, shardNote(p.ZeRO >= 3, shards))
	fmt.Fprintf(b, "  gradients   %10s  × %g B%s\n", Bytes(m.Grad), g, shardNote(p.ZeRO >= 2, shards))
	fmt.Fprintf(b, "  optimizer   %10s  × %g B (Adam m, v%s)%s\n", Bytes(m.Optim), k, masterNote(p.Precision), shardNote(p.ZeRO >= 1, shards))
	fmt.Fprintf(b, "  activations %10s  %s per micro-batch × %s in flight (%s, stage %d of %d), recompute=%s, sp=%s, flash=%s\n",
		Bytes(m.Act), Bytes(m.ActPerMicroBatch), trimFloat(m.InFlight), p.Schedule, m.Stage, p.PP, p.Recompute, onOff(p.SP), onOff(p.Flash))
	if extra := m.Act - int64(float64(m.ActPerMicroBatch)*m.InFlight); extra > m.Act/100 {
		fmt.Fprintf(b, "              %10s  of it beyond those: one layer being recomputed, or GPipe's logits of every micro-batch\n", Bytes(extra))
	}
	fmt.Fprintf(b, "  other       %10s  runtime %s, workspace %s, buffers %s\n", Bytes(m.Other), Bytes(m.Reserved), Bytes(m.Workspace), Bytes(m.Buffers))
}

func shardNote(sharded bool, n int) string {
	if sharded && n > 1 {
		return fmt.Sprintf(" / %d (ZeRO shards over dp·cp)", n)
	}
	return ""
}

func masterNote(p Precision) string {
	if p == FP32 {
		return ""
	}
	return ", fp32 master"
}

func (j Job) explainTime(b *strings.Builder, e Estimate) {
	t, p := e.Time, e.Plan
	fmt.Fprintf(b, "step %.3f s: %.1f%% MFU, %.1f%% HFU, %.0f TFLOP/s per device, %.4g tokens/s\n",
		t.Step, 100*e.MFU, 100*e.HFU, e.TFLOPsPerDevice, e.TokensPerS)
	fmt.Fprintf(b, "  compute     %8.3f s  %s × %.4f s on stage %d (recompute=%s adds %.0f%% FLOPs)\n",
		t.Compute, microBatches(float64(t.MicroBatches)), t.Compute/float64(t.MicroBatches), t.SlowStage, p.Recompute, 100*(e.HWFLOPs/e.ModelFLOPs-1))
	fmt.Fprintf(b, "  comm        %8.3f s  exposed: tp %.3f%s, cp %.3f, pp %.3f, dp/zero %.3f\n", t.CommExposed, t.TP,
		overlapNote(j.tpOverlap(p, place(p, j.Cluster.DevicesPerNode))), t.CP, t.PP, t.DP)
	if p.PP > 1 {
		pt, _ := newPartition(j.Model.Layers, p.PP, p.VPP)
		fmt.Fprintf(b, "  pipeline    %d layers over %d stages: %s\n", j.Model.Layers, p.PP, pt.describe())
	}
	if p.Schedule == ZBH1 {
		fmt.Fprintf(b, "  bubble      %8.3f s  zb-h1: (pp-1)·(F+B-2W) = %d × (stage %.4f s less twice its weight-gradient GEMMs); %.1f%% of the step\n",
			t.Bubble, p.PP-1, t.StageTime, 100*t.Bubble/t.Step)
	} else {
		fmt.Fprintf(b, "  bubble      %8.3f s  (pp-1)/vpp = %d/%d stage times of %.4f s; %.1f%% of the step\n",
			t.Bubble, p.PP-1, p.VPP, t.StageTime, 100*t.Bubble/t.Step)
	}
	fmt.Fprintf(b, "  misc        %8.3f s  optimizer step (memory-bound)\n", t.Misc)
}

func explainVersus(b *strings.Builder, e, best Estimate) {
	if e.Plan == best.Plan {
		b.WriteString("this is the best plan found.\n")
		return
	}
	fmt.Fprintf(b, "versus the best plan %s (%.3f s):\n", best.Plan.Short(), best.Time.Step)
	d := e.Time.Step/best.Time.Step - 1
	if d >= 0 && d < 5e-4 {
		fmt.Fprintf(b, "  as fast (within 0.05%%); ranked below it by memory (%s vs %s) or by name\n", Bytes(e.Memory.Total), Bytes(best.Memory.Total))
		return
	}
	if d >= 0 {
		fmt.Fprintf(b, "  %.1f%% slower", 100*d)
	} else {
		fmt.Fprintf(b, "  %.1f%% faster (but the best fits and this one does not)", -100*d)
	}
	parts := []struct {
		name string
		a, b float64
	}{{"compute", e.Time.Compute, best.Time.Compute}, {"tp comm", e.Time.TP, best.Time.TP},
		{"cp comm", e.Time.CP, best.Time.CP}, {"pp comm", e.Time.PP, best.Time.PP},
		{"dp/zero comm", e.Time.DP, best.Time.DP}, {"bubble", e.Time.Bubble, best.Time.Bubble}, {"misc", e.Time.Misc, best.Time.Misc}}
	b.WriteString(":")
	for _, q := range parts {
		if diff := q.a - q.b; diff > 1e-4*best.Time.Step || diff < -1e-4*best.Time.Step {
			fmt.Fprintf(b, " %s %+.3f s;", q.name, diff)
		}
	}
	b.WriteString("\n")
}

func overlapNote(on bool) string {
	if on {
		return " (pipelined with its GEMMs)"
	}
	return ""
}
