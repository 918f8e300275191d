package plan

import (
	"strings"
	"testing"
)

// The engine runs an MoE Llama whose experts are its MoE layer's, at
// tp=1 and ep=1 (or ep > 1 with capacity or dropless routing, ep dividing
// dp and the experts, cp=1, etp=1), and refuses by name what it does not compute.
func TestEngineRefusesMoEByName(t *testing.T) {
	m := Model{Name: "moe", Family: Llama, Layers: 4, Hidden: 64, Heads: 4, KVHeads: 4, FFN: 128, Vocab: 256, MaxSeq: 32,
		MoE: &MoE{Experts: 8, TopK: 2, FFN: 32, SharedFFN: 32, DenseFirst: 1, Every: 1, Score: "softmax"}}
	p := Default()
	p.Precision, p.Flash = FP32, false
	if got := EngineRefusals(m, p); len(got) != 0 {
		t.Fatalf("an engine-shaped MoE model is refused: %v", got)
	}
	ep := m
	ep.MoE = &MoE{Experts: 8, TopK: 2, FFN: 32, CapacityFactor: 1.25}
	pe := p
	pe.DP = 4
	pe.SetExperts(4, 1)
	if got := EngineRefusals(ep, pe); len(got) != 0 {
		t.Errorf("ep=4 over dp=4 with capacity routing is refused: %v", got)
	}
	dl := m
	dl.MoE = &MoE{Experts: 8, TopK: 2, FFN: 32} // dropless
	if got := EngineRefusals(dl, pe); len(got) != 0 {
		t.Errorf("ep=4 over dp=4 with dropless routing is refused: %v", got)
	}
	etp := p
	etp.TP, etp.SP, etp.DP = 2, true, 2
	etp.SetExperts(2, 2)
	if got := EngineRefusals(ep, etp); len(got) != 0 {
		t.Errorf("tp=2,sp=on,etp=2 with ep=2 over dp=2 is refused: %v", got)
	}
	if etp.SP = false; len(EngineRefusals(ep, etp)) != 0 {
		t.Errorf("tp=2,etp=2 without sp with ep=2 over dp=2 is refused: %v", EngineRefusals(ep, etp))
	}
	sig := m
	sig.MoE = &MoE{Experts: 8, TopK: 2, FFN: 32, Score: "sigmoid"}
	if got := EngineRefusals(sig, p); len(got) != 0 {
		t.Errorf("a sigmoid router is refused: %v", got)
	}
	sb := m
	sb.MoE = &MoE{Experts: 8, TopK: 2, FFN: 32, Score: "sigmoid", SelectionBias: true}
	if got := EngineRefusals(sb, pe); len(got) != 0 {
		t.Errorf("DeepSeek-V3's selection bias under ep=4 is refused: %v", got)
	}
	for _, c := range []struct {
		edit func(*Model, *Plan)
		want string
	}{
		{func(m *Model, _ *Plan) { m.MoE.RouterBias = true }, "router_bias=true"},
		{func(m *Model, _ *Plan) { m.MoE.RouterBias, m.MoE.SelectionBias = true, true }, "router_bias=true"},
		{func(m *Model, _ *Plan) { m.MoE.SharedGate = true }, "shared_gate=true"},
		{func(m *Model, _ *Plan) { m.MoE.Groups, m.MoE.GroupTopK = 4, 2 }, "moe.groups=4, group_top_k=2"},
		{func(m *Model, _ *Plan) { m.MoE.SharedFFN = 48 }, "moe.shared_ffn=48"},
		{func(_ *Model, p *Plan) { p.TP, p.SP = 2, true }, "tp=2 with experts and etp=1"},
		{func(m *Model, p *Plan) { m.MoE.CapacityFactor, p.DP = 1, 4; p.SetExperts(2, 2) }, "etp=2 with tp=1: the engine's expert tensor parallelism is the tensor-parallel group's"},
		{func(m *Model, p *Plan) { m.MoE.CapacityFactor, p.DP = 1, 2; p.SetExperts(4, 1) }, "ep=4 does not divide dp=2"},
		{func(m *Model, p *Plan) { m.MoE.CapacityFactor, p.DP = 1, 3; p.SetExperts(3, 1) }, "ep=3 does not divide moe.experts=8"},
		{func(m *Model, _ *Plan) { m.MLA = &MLA{KVRank: 16} }, "multi-head latent attention"},
		{func(m *Model, _ *Plan) { m.Family = GPT }, "experts replace a Llama block's SwiGLU"},
	} {
		mm, pp := m, p
		e := *m.MoE
		mm.MoE = &e
		c.edit(&mm, &pp)
		got := strings.Join(EngineRefusals(mm, pp), "; ")
		if !strings.Contains(got, c.want) {
			t.Errorf("refusals %q, want one containing %q", got, c.want)
		}
	}
}

// DeepSeek-V3's selection bias is E buffers a layer, not parameters;
// GPT-OSS's learned router bias is E parameters a layer; the presets say
// which is which, and Megatron's --moe-router-enable-expert-bias is the
// selection bias.
func TestSelectionBiasIsNoParameter(t *testing.T) {
	m := Model{Name: "moe", Family: Llama, Layers: 4, Hidden: 64, Heads: 4, KVHeads: 4, FFN: 128, Vocab: 256, MaxSeq: 32,
		MoE: &MoE{Experts: 8, TopK: 2, FFN: 32, Score: "sigmoid"}}
	base := m.Params()
	sel, lin := m, m
	es, el := *m.MoE, *m.MoE
	es.SelectionBias, el.RouterBias = true, true
	sel.MoE, lin.MoE = &es, &el
	if got := sel.Params(); got != base {
		t.Errorf("selection bias: %d parameters, want %d (no parameters)", got, base)
	}
	if got, want := lin.Params(), base+int64(m.MoELayers()*8); got != want {
		t.Errorf("learned router bias: %d parameters, want %d (E a layer)", got, want)
	}
	for name, want := range map[string][2]bool{"deepseek-v3": {true, false}, "kimi-k2": {true, false}, "gpt-oss-120b": {false, true}} {
		p, err := ModelPreset(name)
		if err != nil || p.MoE == nil {
			t.Fatalf("no MoE preset %s", name)
		}
		if got := [2]bool{p.MoE.SelectionBias, p.MoE.RouterBias}; got != want {
			t.Errorf("%s: selection, router bias %v, want %v", name, got, want)
		}
	}
}
