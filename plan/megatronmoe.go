package plan

import (
	"fmt"
	"strconv"
	"strings"
)

// Megatron-LM's arguments for experts, multi-head latent attention and
// MTP (megatron/training/arguments.py at core_v0.12.0; the MoE README's
// argument table): the rows megatronTable adds, what emission writes and
// what the reader takes.
func megatronMoETable() []fwArg {
	return []fwArg{
		{"--num-experts", "model.moe.experts"},
		{"--moe-router-topk", "model.moe.top_k"},
		{"--moe-ffn-hidden-size", "model.moe.ffn"},
		{"--moe-shared-expert-intermediate-size", "model.moe.shared_ffn"},
		{"--moe-layer-freq", "model.moe dense_first/every: an integer N (every N-th layer) or a list such as ([0]*3+[1]*58)"},
		{"--moe-router-score-function", "model.moe.score: softmax or sigmoid"},
		{"--moe-router-enable-expert-bias", "model.moe.selection_bias (DeepSeek-V3's aux-loss-free bias; router_bias is GPT-OSS's learned one)"},
		{"--moe-router-num-groups", "model.moe.groups (group-limited routing)"},
		{"--moe-router-group-topk", "model.moe.group_top_k"},
		{"--moe-expert-capacity-factor", "model.moe.capacity_factor (with --moe-pad-expert-input-to-capacity)"},
		{"--moe-pad-expert-input-to-capacity", "model.moe.capacity_factor: experts padded to it"},
		{"--moe-grouped-gemm", "the cluster's moe_expert_loop=false (a property of the stack)"},
		{"--moe-token-dispatcher-type", "the cluster's moe_dispatcher: alltoall, allgather, or flex with --moe-enable-deepep (deepep)"},
		{"--moe-enable-deepep", "the cluster's moe_dispatcher=deepep"},
		{"--expert-model-parallel-size", "ep"},
		{"--expert-tensor-parallel-size", "etp (default: tp)"},
		{"--multi-latent-attention", "model.mla"},
		{"--q-lora-rank", "model.mla.q_rank"},
		{"--kv-lora-rank", "model.mla.kv_rank"},
		{"--qk-head-dim", "model.mla.qk_nope"},
		{"--qk-pos-emb-head-dim", "model.mla.qk_rope"},
		{"--v-head-dim", "model.mla.v"},
		{"--qk-layernorm", "model.qk_norm"},
		{"--mtp-num-layers", "model.mtp"},
		{"--pipeline-model-parallel-layout", "the layer split chunk by chunk, and vpp (core_v0.14.0; megatronlayout.go)"},
		{"--overlap-moe-expert-parallel-comm", "the cluster's moe_ep_overlap (core_v0.14.0)"},
		{"--moe-deepep-num-sms", "the cluster's moe_comm_sms with DeepEP (core_v0.14.0; default 20)"},
		{"--use-megatron-fsdp", "zero 2, 3 (core_v0.14.0's name of --use-custom-fsdp)"},
	}
}

// megatronMoESwitch reports the switches among megatronMoETable's flags.
func megatronMoESwitch(flag string) bool {
	switch flag {
	case "--moe-router-enable-expert-bias", "--moe-pad-expert-input-to-capacity", "--moe-grouped-gemm",
		"--moe-enable-deepep", "--multi-latent-attention", "--qk-layernorm", "--overlap-moe-expert-parallel-comm", "--use-megatron-fsdp":
		return true
	}
	return false
}

// megatronDispatcher is the --moe-token-dispatcher-type for the cluster's
// dispatcher.
func megatronDispatcher(s MoESoftware) string {
	switch s.Dispatcher {
	case "allgather":
		return "allgather"
	case "deepep":
		return "flex"
	}
	return "alltoall"
}

// megatronMoEArgs writes the model's experts, attention variant and MTP,
// and p's expert degrees.
func (j Job) megatronMoEArgs(a *args, p Plan) {
	m := j.Model
	if m.moe() {
		e := m.experts()
		ep, etp := p.Experts()
		a.add("--expert-model-parallel-size", ep)
		a.add("--expert-tensor-parallel-size", etp)
		a.add("--num-experts", e.Experts)
		a.add("--moe-router-topk", e.TopK)
		a.add("--moe-ffn-hidden-size", e.FFN)
		if e.SharedFFN > 0 {
			a.add("--moe-shared-expert-intermediate-size", e.SharedFFN)
		}
		if f := moeLayerFreq(m); f != "1" {
			a.add("--moe-layer-freq", "'"+f+"'") // a Python expression: quoted for the shell
		}
		if e.Score != "" {
			a.add("--moe-router-score-function", e.Score)
		}
		a.flag("--moe-router-enable-expert-bias", e.SelectionBias)
		if e.Groups > 0 {
			a.add("--moe-router-num-groups", e.Groups)
			a.add("--moe-router-group-topk", e.GroupTopK)
		}
		if e.CapacityFactor > 0 {
			a.add("--moe-expert-capacity-factor", strconv.FormatFloat(e.CapacityFactor, 'g', -1, 64))
			a.flag("--moe-pad-expert-input-to-capacity", true)
		}
		sw := j.Cluster.Software.MoE
		a.flag("--moe-grouped-gemm", !sw.ExpertLoop)
		a.add("--moe-token-dispatcher-type", megatronDispatcher(sw))
		a.flag("--moe-enable-deepep", sw.Dispatcher == "deepep")
		if sw.Dispatcher == "deepep" && sw.CommSMs > 0 {
			a.add("--moe-deepep-num-sms", sw.CommSMs)
		}
		a.flag("--overlap-moe-expert-parallel-comm", sw.EPOverlap)
	}
	if m.mla() {
		x := m.latent()
		a.flag("--multi-latent-attention", true)
		if x.QRank > 0 {
			a.add("--q-lora-rank", x.QRank)
		}
		a.add("--kv-lora-rank", x.KVRank)
		a.add("--qk-head-dim", x.QKNope)
		a.add("--qk-pos-emb-head-dim", x.QKRope)
		a.add("--v-head-dim", x.V)
	}
	a.flag("--qk-layernorm", m.QKNorm)
	if m.MTP > 0 {
		a.add("--mtp-num-layers", m.MTP)
	}
}

// moeLayerFreq writes the model's MoE layers as --moe-layer-freq: an
// integer N when every N-th layer from the first is one (Megatron: layer
// i when i % N = 0), else the runs of Megatron's list form,
// ([0]*3+[1]*58).
func moeLayerFreq(m Model) string {
	e := m.experts()
	if e.DenseFirst == 0 && e.Phase == 0 {
		return strconv.Itoa(max(1, e.Every))
	}
	var runs []string
	for i := 0; i < m.Layers; {
		v, n := m.moeLayer(i), 0
		for i < m.Layers && m.moeLayer(i) == v {
			i, n = i+1, n+1
		}
		runs = append(runs, fmt.Sprintf("[%d]*%d", b2i(v), n))
	}
	return "(" + strings.Join(runs, "+") + ")"
}

// parseLayerFreq reads --moe-layer-freq: an integer N, or a Python list
// expression of 0s and 1s built from [..] literals, *n repetition, +
// concatenation and parentheses, e.g. ([0]*3+[1]*58) or ([1]*3+[0])*2.
func parseLayerFreq(s string, layers int) ([]bool, error) {
	if n, err := strconv.Atoi(strings.TrimSpace(s)); err == nil {
		if n < 1 {
			return nil, fmt.Errorf("plan: megatron arguments: --moe-layer-freq %d: want at least 1", n)
		}
		out := make([]bool, layers)
		for i := range out {
			out[i] = i%n == 0
		}
		return out, nil
	}
	p := freqParser{s: strings.ReplaceAll(s, " ", "")}
	out, err := p.sum()
	if err == nil && p.i != len(p.s) {
		err = fmt.Errorf("unexpected %q", p.s[p.i:])
	}
	if err != nil {
		return nil, fmt.Errorf("plan: megatron arguments: --moe-layer-freq %q: %v", s, err)
	}
	if len(out) != layers {
		return nil, fmt.Errorf("plan: megatron arguments: --moe-layer-freq %q has %d layers, the model %d", s, len(out), layers)
	}
	return out, nil
}

// freqParser parses sum := term ('+' term)*; term := atom ('*' int)?;
// atom := '[' 0|1 (',' 0|1)* ']' | '(' sum ')'.
type freqParser struct {
	s string
	i int
}

func (p *freqParser) sum() ([]bool, error) {
	out, err := p.term()
	for err == nil && p.i < len(p.s) && p.s[p.i] == '+' {
		p.i++
		var t []bool
		if t, err = p.term(); err == nil {
			out = append(out, t...)
		}
	}
	return out, err
}

func (p *freqParser) term() ([]bool, error) {
	a, err := p.atom()
	if err != nil || p.i >= len(p.s) || p.s[p.i] != '*' {
		return a, err
	}
	p.i++
	j := p.i
	for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
		p.i++
	}
	n, err := strconv.Atoi(p.s[j:p.i])
	if err != nil || n < 0 || n > maxDim || len(a)*n > maxDim {
		return nil, fmt.Errorf("bad repetition %q", p.s[j:p.i])
	}
	var out []bool
	for k := 0; k < n; k++ {
		out = append(out, a...)
	}
	return out, nil
}

func (p *freqParser) atom() ([]bool, error) {
	if p.i >= len(p.s) {
		return nil, fmt.Errorf("unexpected end")
	}
	switch p.s[p.i] {
	case '(':
		p.i++
		out, err := p.sum()
		if err != nil || p.i >= len(p.s) || p.s[p.i] != ')' {
			return nil, fmt.Errorf("unclosed (")
		}
		p.i++
		return out, nil
	case '[':
		p.i++
		var out []bool
		for {
			if p.i >= len(p.s) || (p.s[p.i] != '0' && p.s[p.i] != '1') {
				return nil, fmt.Errorf("want 0 or 1 in a list")
			}
			out = append(out, p.s[p.i] == '1')
			p.i++
			if p.i < len(p.s) && p.s[p.i] == ',' {
				p.i++
				continue
			}
			if p.i < len(p.s) && p.s[p.i] == ']' {
				p.i++
				return out, nil
			}
			return nil, fmt.Errorf("unclosed [")
		}
	}
	return nil, fmt.Errorf("unexpected %q", p.s[p.i:])
}
