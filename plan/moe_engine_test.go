package plan

import (
	"strings"
	"testing"
)

// The engine runs an MoE Llama whose experts are its MoE layer's, at ep=1
// and tp=1, and refuses by name what it does not compute.
func TestEngineRefusesMoEByName(t *testing.T) {
	m := Model{Name: "moe", Family: Llama, Layers: 4, Hidden: 64, Heads: 4, KVHeads: 4, FFN: 128, Vocab: 256, MaxSeq: 32,
		MoE: &MoE{Experts: 8, TopK: 2, FFN: 32, SharedFFN: 32, DenseFirst: 1, Every: 1, Score: "softmax"}}
	p := Default()
	p.Precision, p.Flash = FP32, false
	if got := EngineRefusals(m, p); len(got) != 0 {
		t.Fatalf("an engine-shaped MoE model is refused: %v", got)
	}
	sig := m
	sig.MoE = &MoE{Experts: 8, TopK: 2, FFN: 32, Score: "sigmoid"}
	if got := EngineRefusals(sig, p); len(got) != 0 {
		t.Errorf("a sigmoid router is refused: %v", got)
	}
	for _, c := range []struct {
		edit func(*Model, *Plan)
		want string
	}{
		{func(m *Model, _ *Plan) { m.MoE.RouterBias = true }, "router_bias=true"},
		{func(m *Model, _ *Plan) { m.MoE.SharedGate = true }, "shared_gate=true"},
		{func(m *Model, _ *Plan) { m.MoE.Groups, m.MoE.GroupTopK = 4, 2 }, "moe.groups=4, group_top_k=2"},
		{func(m *Model, _ *Plan) { m.MoE.SharedFFN = 48 }, "moe.shared_ffn=48"},
		{func(_ *Model, p *Plan) { p.TP = 2 }, "tp=2 with experts"},
		{func(_ *Model, p *Plan) { p.SetExperts(2, 1) }, "ep=2, etp=1: the engine does not implement expert parallelism"},
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
