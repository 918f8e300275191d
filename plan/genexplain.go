package plan

import (
	"fmt"
	"strings"
)

// explainGeneral is Explain for the general path: memory by category with
// the dense and expert parts, the step by term with the all-to-all, the
// experts' mesh and the pipeline's layout.
func (j Job) explainGeneral(b *strings.Builder, p Plan, best *Estimate) {
	pl := j.onHost(p, place(p, j.Cluster.DevicesPerNode))
	lay := j.newLayout(p)
	g := j.newGeneralCosts(p, pl, lay)
	mem := j.generalMemory(p, lay)
	e := j.generalFinish(p, pl, &g, mem)
	_, ranks := j.generalStepTime(p, pl, &g)
	j.explainGeneralMemory(b, e, lay, g)
	j.explainGeneralTime(b, e, lay, g, ranks)
	if best != nil {
		explainVersus(b, e, *best)
	}
}

func (j Job) explainGeneralMemory(b *strings.Builder, e Estimate, lay *layout, g generalCosts) {
	m, p := e.Memory, e.Plan
	if m.Fits() {
		fmt.Fprintf(b, "fits: %s of %s on pipeline rank %d (the most loaded device), %s of headroom\n", Bytes(m.Total), Bytes(m.Budget), m.Stage, Bytes(m.Budget-m.Total))
	} else {
		fmt.Fprintf(b, "rejected: %s\n", e.Why())
	}
	var gr genRank
	for _, x := range lay.genMem {
		if x.rank == m.Stage {
			gr = x
		}
	}
	dense, expert := gr.params(j, p, g.kp, lay.C)
	nd, ne := p.shards()
	w, gb, k := stateBytes(p, j.Cluster.Software)
	ep, etp := p.Experts()
	parts := fmt.Sprintf("%.4g dense params (attention, norms, dense MLPs, routers, shared experts, embedding, output layer)", dense)
	if j.Model.moe() {
		parts += fmt.Sprintf(" + %.4g expert params (%d of %d experts per rank in each of %s MoE layers, 1/%d of each)",
			expert, j.Model.experts().Experts/ep, j.Model.experts().Experts, trimFloat(gr.held[2]+gr.held[3]), etp)
	}
	shard := func(on bool) string {
		if !on || (nd == 1 && ne == 1) {
			return ""
		}
		return fmt.Sprintf(" / (%g dense, %g experts: ZeRO over dp·cp and edp)", nd, ne)
	}
	fmt.Fprintf(b, "  parameters  %10s  %s on rank %d (%d layers) × %g B%s\n", Bytes(m.Param), parts, m.Stage, m.Layers, w, shard(p.ZeRO >= 3))
	fmt.Fprintf(b, "  gradients   %10s  × %g B%s\n", Bytes(m.Grad), gb, shard(p.ZeRO >= 2))
	master := masterNote(p.Precision)
	if j.Cluster.Software.FP32Params && p.Precision != FP32 {
		master = "; the fp32 parameters are the master"
	}
	fmt.Fprintf(b, "  optimizer   %10s  × %g B (Adam m, v%s)%s\n", Bytes(m.Optim), k, master, shard(p.ZeRO >= 1))
	if p.Schedule == DualPipe {
		b.WriteString("              (dualpipe: the rank holds chunks r and pp−1−r, every parameter on two ranks)\n")
	}
	fmt.Fprintf(b, "  activations %10s  %s per micro-batch × %s in flight (%s, rank %d of %d), recompute=%s, sp=%s, flash=%s\n",
		Bytes(m.Act), Bytes(m.ActPerMicroBatch), trimFloat(m.InFlight), p.Schedule, m.Stage, p.PP, recomputeNote(p, j.Cluster.Software), onOff(p.SP), onOff(p.Flash))
	if j.Model.moe() {
		rc := g.ks.kind[1][0].routed
		if !g.ks.have[1][0] {
			rc = g.ks.kind[1][1].routed
		}
		fmt.Fprintf(b, "              of a layer with experts: %.4g routed token copies on the rank (load ρ = %g), %s of dispatcher buffers\n",
			rc.local, j.routedLoad(), Bytes(int64(j.memKinds(p, lay.have).moeWS)))
	}
	fmt.Fprintf(b, "  other       %10s  runtime %s, workspace %s, buffers %s\n", Bytes(m.Other), Bytes(m.Reserved), Bytes(m.Workspace), Bytes(m.Buffers))
}

func (j Job) explainGeneralTime(b *strings.Builder, e Estimate, lay *layout, g generalCosts, ranks []rankCost) {
	t, p := e.Time, e.Plan
	fmt.Fprintf(b, "step %.3f s: %.1f%% MFU, %.1f%% HFU, %.0f TFLOP/s per device, %.4g tokens/s\n",
		t.Step, 100*e.MFU, 100*e.HFU, e.TFLOPsPerDevice, e.TokensPerS)
	var slow rankCost
	for _, rc := range ranks {
		if rc.rank == t.SlowStage {
			slow = rc
		}
	}
	fmt.Fprintf(b, "  compute     %8.3f s  %s × %.4f s on rank %d (recompute=%s adds %.0f%% FLOPs)\n",
		t.Compute, microBatches(float64(t.MicroBatches)), t.Compute/float64(t.MicroBatches), t.SlowStage, p.Recompute, 100*(e.HWFLOPs/e.ModelFLOPs-1))
	if j.Model.moe() {
		j.explainExperts(b, g, slow)
	}
	fmt.Fprintf(b, "  comm        %8.3f s  exposed: tp %.3f%s, cp %.3f, pp %.3f, ep %.3f, dp/zero %.3f\n", t.CommExposed, t.TP,
		overlapNote(j.tpOverlap(p, place(p, j.Cluster.DevicesPerNode))), t.CP, t.PP, t.EP, t.DP)
	if j.Model.moe() {
		ov := "not overlapped"
		if j.Cluster.Software.MoE.EPOverlap || p.Schedule.dual() {
			ov = "overlapped with another micro-batch's compute"
			if e := j.Cluster.Software.MoE.EPOverlapEff; e > 0 && e < 1 {
				ov += fmt.Sprintf(", of which the stack hides at most %.0f%% (moe_ep_overlap_eff)", 100*e)
			}
		}
		disp := j.Cluster.Software.MoE.Dispatcher
		if disp == "" {
			disp = "alltoall"
		}
		fmt.Fprintf(b, "              all-to-all (%s dispatcher): %.3f s a step before overlap, %s\n", disp, float64(t.MicroBatches)*slow.a2a, ov)
	}
	if p.PP > 1 {
		fmt.Fprintf(b, "  pipeline    %d layers over %d ranks: %s\n", j.Model.Layers, p.PP, lay.describe())
	}
	switch {
	case p.Schedule.dual():
		fmt.Fprintf(b, "  bubble      %8.3f s  %s: (C/2−1)·(F&B + B − 3W) over C = %d chunks, chunk %.4f s; %.1f%% of the step\n",
			t.Bubble, p.Schedule, lay.C, t.StageTime/2, 100*t.Bubble/t.Step)
	case p.Schedule == ZBH1:
		fmt.Fprintf(b, "  bubble      %8.3f s  zb-h1: (pp-1)·(F+B-2W); %.1f%% of the step\n", t.Bubble, 100*t.Bubble/t.Step)
	default:
		fmt.Fprintf(b, "  bubble      %8.3f s  (pp-1)/vpp = %d/%d mean rank times; %.1f%% of the step\n", t.Bubble, p.PP-1, p.VPP, 100*t.Bubble/t.Step)
	}
	fmt.Fprintf(b, "  misc        %8.3f s  optimizer step (memory-bound)\n", t.Misc)
}

// explainExperts says what one MoE layer costs on the slowest rank.
func (j Job) explainExperts(b *strings.Builder, g generalCosts, slow rankCost) {
	kc := g.ks.kind[1][0]
	if !g.ks.have[1][0] {
		kc = g.ks.kind[1][1]
	}
	rc := kc.routed
	ex := g.ex
	fmt.Fprintf(b, "              a layer with experts, per micro-batch: %.4f s compute, of which experts %.4f s (%.4g tokens per local expert); all-to-all %.4f s, exposed %.4f s\n",
		kc.compute.total(), rc.experts.total(), rc.perExpert, kc.a2a, kc.ep)
	fmt.Fprintf(b, "              expert mesh: etp=%d (%d per node), ep=%d (%d per node, %d nodes), edp=%d\n",
		ex.etp.n, ex.etp.k, ex.ep.n, ex.ep.k, ex.ep.nodes(), ex.edp.n)
}

// describe lists each rank's layers, as "dense+moe" when they differ.
func (lay *layout) describe() string {
	var parts []string
	for _, rs := range lay.ranks {
		l, mo, _, _, _ := rs.totals()
		s := fmt.Sprint(l)
		if mo > 0 && mo < l {
			s = fmt.Sprintf("%d+%d", l-mo, mo)
		}
		if len(rs.chunks) > 1 {
			var cs []string
			for _, c := range rs.chunks {
				cs = append(cs, fmt.Sprint(c.layers))
			}
			s += " (" + strings.Join(cs, "+") + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ") + " (dense+moe layers, chunks in brackets)"
}

// recomputeNote names the recomputation policy, torchtitan's per-op one
// where the software profile makes selective mean it.
func recomputeNote(p Plan, sw Software) string {
	if p.Recompute == RecomputeSelective && sw.OpSAC {
		return "selective (torchtitan's per-op policy)"
	}
	return string(p.Recompute)
}
