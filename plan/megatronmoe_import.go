package plan

import (
	"fmt"
	"strconv"
)

// megatronExperts reads the expert degrees (Megatron's
// --expert-tensor-parallel-size defaults to the tensor-parallel size) and
// notes dispatcher and grouped-GEMM flags that differ from the cluster's
// software profile, whose values are costed (as --tp-comm-overlap is).
func (j Job) megatronExperts(g megatronRead, p *Plan, notes *[]string) error {
	ep, err := g.int("--expert-model-parallel-size", 1)
	if err != nil {
		return err
	}
	etp, err := g.int("--expert-tensor-parallel-size", p.TP)
	if err != nil {
		return err
	}
	if ep < 1 || etp < 1 {
		return fmt.Errorf("plan: megatron arguments: --expert-model-parallel-size %d, --expert-tensor-parallel-size %d: must be at least 1", ep, etp)
	}
	if !j.Model.moe() {
		if ep > 1 || (g.has("--expert-tensor-parallel-size") && etp > 1) {
			return fmt.Errorf("plan: megatron arguments: --expert-model-parallel-size %d, --expert-tensor-parallel-size %d: the model %s has no experts", ep, etp, j.Model.Name)
		}
		return nil
	}
	p.SetExperts(ep, etp)
	sw := j.Cluster.Software.MoE
	disp := g["--moe-token-dispatcher-type"]
	if disp == "" {
		disp = "allgather" // Megatron's default
	}
	if want := megatronDispatcher(sw); disp != want || g.has("--moe-enable-deepep") != (sw.Dispatcher == "deepep") {
		*notes = append(*notes, fmt.Sprintf("--moe-token-dispatcher-type %s (deepep %v), but the cluster %s says moe_dispatcher=%q: the cluster's is used",
			disp, g.has("--moe-enable-deepep"), j.Cluster.Name, sw.Dispatcher))
	}
	if g.has("--overlap-moe-expert-parallel-comm") != sw.EPOverlap {
		*notes = append(*notes, fmt.Sprintf("--overlap-moe-expert-parallel-comm given=%v, but the cluster %s says moe_ep_overlap=%v: the cluster's is used",
			g.has("--overlap-moe-expert-parallel-comm"), j.Cluster.Name, sw.EPOverlap))
	}
	if sms, err := g.int("--moe-deepep-num-sms", 20); err != nil {
		return err
	} else if sw.Dispatcher == "deepep" && sw.CommSMs > 0 && sms != sw.CommSMs {
		*notes = append(*notes, fmt.Sprintf("--moe-deepep-num-sms %d, but the cluster %s says moe_comm_sms=%d: the cluster's is used", sms, j.Cluster.Name, sw.CommSMs))
	}
	if g.has("--moe-grouped-gemm") == sw.ExpertLoop {
		*notes = append(*notes, fmt.Sprintf("--moe-grouped-gemm given=%v, but the cluster %s says moe_expert_loop=%v: the cluster's is used",
			g.has("--moe-grouped-gemm"), j.Cluster.Name, sw.ExpertLoop))
	}
	return nil
}

// megatronMoEShape checks the arguments' experts, attention variant and
// MTP against the job's model: a different value is an error naming the
// flag. Defaults are Megatron's (--moe-router-topk 2, --moe-ffn-hidden-size
// the FFN, every layer an MoE layer, softmax scores, no MTP).
func (j Job) megatronMoEShape(g megatronRead) error {
	m := j.Model
	e := m.experts()
	ints := []struct {
		flag      string
		want, def int
	}{
		{"--num-experts", e.Experts, 0}, {"--moe-router-topk", e.TopK, 2}, {"--moe-ffn-hidden-size", e.FFN, m.FFN},
		{"--moe-shared-expert-intermediate-size", e.SharedFFN, 0}, {"--moe-router-num-groups", e.Groups, 0},
		{"--moe-router-group-topk", e.GroupTopK, 0}, {"--mtp-num-layers", m.MTP, 0},
	}
	if !m.moe() {
		ints = ints[:1]
	}
	if a := m.latent(); m.mla() {
		ints = append(ints, []struct {
			flag      string
			want, def int
		}{{"--q-lora-rank", a.QRank, 0}, {"--kv-lora-rank", a.KVRank, 0}, {"--qk-head-dim", a.QKNope, 0},
			{"--qk-pos-emb-head-dim", a.QKRope, 0}, {"--v-head-dim", a.V, 0}}...)
	}
	for _, c := range ints {
		n, err := g.int(c.flag, c.def)
		if err != nil {
			return err
		}
		if n != c.want {
			return fmt.Errorf("plan: megatron arguments: %s %d, but the model %s has %d", c.flag, n, m.Name, c.want)
		}
	}
	bools := []struct {
		what      string
		got, want bool
	}{
		{"--multi-latent-attention", g.has("--multi-latent-attention"), m.mla()},
		{"--qk-layernorm", g.has("--qk-layernorm"), m.QKNorm},
	}
	if m.moe() {
		bools = append(bools, struct {
			what      string
			got, want bool
		}{"--moe-router-enable-expert-bias", g.has("--moe-router-enable-expert-bias"), e.SelectionBias})
	}
	for _, b := range bools {
		if b.got != b.want {
			return fmt.Errorf("plan: megatron arguments: %s is %v, but the model %s says %v", b.what, b.got, m.Name, b.want)
		}
	}
	if !m.moe() {
		return nil
	}
	if s := g["--moe-router-score-function"]; (s == "" && e.Score == "sigmoid") || (s != "" && s != e.Score) {
		return fmt.Errorf("plan: megatron arguments: --moe-router-score-function %q, but the model %s scores with %s", s, m.Name, e.Score)
	}
	pattern, err := parseLayerFreq(orDefault(g["--moe-layer-freq"], "1"), m.Layers)
	if err != nil {
		return err
	}
	for i, v := range pattern {
		if v != m.moeLayer(i) {
			return fmt.Errorf("plan: megatron arguments: --moe-layer-freq %s makes layer %d %s, the model %s %s", g["--moe-layer-freq"], i,
				map[bool]string{true: "an MoE layer", false: "dense"}[v], m.Name, map[bool]string{true: "an MoE layer", false: "dense"}[m.moeLayer(i)])
		}
	}
	cf := 0.0
	if v, ok := g["--moe-expert-capacity-factor"]; ok {
		if cf, err = strconv.ParseFloat(v, 64); err != nil || !(cf > 0) {
			return fmt.Errorf("plan: megatron arguments: --moe-expert-capacity-factor %q: want a positive number", v)
		}
		if !g.has("--moe-pad-expert-input-to-capacity") {
			return fmt.Errorf("plan: megatron arguments: --moe-expert-capacity-factor without --moe-pad-expert-input-to-capacity: the planner costs experts padded to their capacity")
		}
	}
	if cf != e.CapacityFactor {
		return fmt.Errorf("plan: megatron arguments: --moe-expert-capacity-factor %g, but the model %s has capacity factor %g (0: dropless)", cf, m.Name, e.CapacityFactor)
	}
	return nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
