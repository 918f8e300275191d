package arch

import (
	"strings"
	"testing"
)

// mixtral8x7b is Mixtral 8x7B (46.7B parameters, 12.9B active).
var mixtral8x7b = Config{Arch: Llama, Layers: 32, Hidden: 4096, Heads: 32, KVHeads: 8, FFN: 14336, SeqLen: 4096, Vocab: 32000,
	RopeTheta: 1e6, Experts: 8, TopK: 2}

// NumParams and Layout agree on an MoE model, by hand and on Mixtral
// 8x7B's published 46,702,792,704; FLOPsPerToken counts the active ones.
func TestMoEParamCount(t *testing.T) {
	if got := mixtral8x7b.NumParams(); got != 46_702_792_704 {
		t.Errorf("Mixtral 8x7B: NumParams %d, want 46,702,792,704", got)
	}
	c := Config{Arch: Llama, Layers: 4, Hidden: 16, Heads: 4, FFN: 24, SeqLen: 8, Vocab: 50,
		Experts: 3, TopK: 2, ExpertFFN: 10, SharedExperts: 2, DenseFirst: 1, MoEEvery: 2}
	// blocks 1 and 3 are MoE: router 3·16, experts 3·3·16·10, shared 3·16·20
	attn := 2*16 + 16*12*4 + 16*16
	moe := 3*16 + 3*3*16*10 + 3*16*20
	want := 50*16 + 16 + 50*16 + 4*attn + 2*3*16*24 + 2*moe
	if got, lay := c.NumParams(), c.Layout(); got != want || lay.Size != want || c.ParamCount() != float64(want) {
		t.Errorf("NumParams %d, layout %d, ParamCount %v, want %d", got, lay.Size, c.ParamCount(), want)
	}
	var moeLayers []int
	for l := range c.Layers {
		if c.MoELayer(l) {
			moeLayers = append(moeLayers, l)
		}
	}
	if len(moeLayers) != 2 || moeLayers[0] != 1 || moeLayers[1] != 3 {
		t.Errorf("MoE layers %v, want [1 3]", moeLayers)
	}
	active := float64(want-50*16) - 2*float64(3*3*16*10) + 2*float64(2*3*16*10)
	if got := c.FLOPsPerToken(); got != 6*active+12*4*8*16 {
		t.Errorf("FLOPsPerToken %v, want %v (active parameters %v)", got, 6*active+12*4*8*16, active)
	}
	if u, want := c.LargestUnit(Part{}), float64(attn+moe); u != want {
		t.Errorf("LargestUnit %v, want the MoE block's %v", u, want)
	}
	if c.Capacity(40) != 0 || c.Routed(40, 1) != 80 {
		t.Errorf("dropless: capacity %d, routed %d", c.Capacity(40), c.Routed(40, 1))
	}
	c.CapacityFactor = 0.5 // ⌈0.5·40·2/3⌉ = 14 per expert, 42 rows
	if c.Capacity(40) != 14 || c.Routed(40, 1) != 42 {
		t.Errorf("capacity 0.5: %d per expert, %d rows; want 14, 42", c.Capacity(40), c.Routed(40, 1))
	}
}

// The MoE keys are validated by name and rule.
func TestMoEValidate(t *testing.T) {
	good := Config{Arch: Llama, Layers: 2, Hidden: 16, Heads: 4, SeqLen: 8, Vocab: 50, Experts: 4, TopK: 2}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	if sig := good; func() error { sig.RouterScore = "sigmoid"; return sig.Validate() }() != nil || !(Config{RouterScore: "sigmoid"}).SigmoidRouter() {
		t.Errorf("router_score=sigmoid refused")
	}
	for _, c := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Arch = "" }, `experts replace a Llama block's SwiGLU`},
		{func(c *Config) { c.TopK = 5 }, "model.top_k=5 must be in [1, model.experts=4]"},
		{func(c *Config) { c.TopK = 0 }, "model.top_k=0"},
		{func(c *Config) { c.Experts = -1 }, "model.experts=-1"},
		{func(c *Config) { c.Experts, c.TopK = 0, 0; c.AuxLoss = 0.1 }, "model.aux_loss is set without model.experts"},
		{func(c *Config) { c.Experts = 0 }, "model.top_k is set without model.experts"},
		{func(c *Config) { c.DenseFirst = 3 }, "model.dense_first=3 exceeds model.layers=2"},
		{func(c *Config) { c.MoEEvery = -2 }, "model.moe_every=-2 must not be negative"},
		{func(c *Config) { c.ExpertFFN = -1 }, "model.expert_ffn_hidden=-1"},
		{func(c *Config) { c.CapacityFactor = -1 }, "model.capacity_factor=-1"},
		{func(c *Config) { c.AuxLoss = -0.5 }, "model.aux_loss=-0.5"},
		{func(c *Config) { c.RouterScore = "top" }, `model.router_score="top": want softmax or sigmoid`},
		{func(c *Config) { c.RouterExpertBias, c.RouterBiasUpdateRate = true, -1e-3 }, "model.router_bias_update_rate=-0.001: want a step in (0, 1]"},
		{func(c *Config) { c.RouterExpertBias, c.RouterBiasUpdateRate = true, 2 }, "model.router_bias_update_rate=2"},
		{func(c *Config) { c.RouterBiasUpdateRate = 1e-3 }, "model.router_bias_update_rate=0.001 is set without model.router_expert_bias=true"},
		{func(c *Config) { c.Experts, c.TopK = 0, 0; c.RouterExpertBias = true }, "model.router_expert_bias is set without model.experts"},
	} {
		cfg := good
		c.edit(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", cfg, err, c.want)
		}
	}
	odd := good
	odd.ExpertFFN = 3
	if err := (Part{TP: 2, SP: true}).Validate(odd); err == nil || !strings.Contains(err.Error(), "tp=2 does not divide the experts' width model.expert_ffn_hidden=3") {
		t.Errorf("tp=2 with experts of width 3: %v", err)
	}
	even := good
	even.ExpertFFN = 4
	if err := (Part{TP: 2, SP: true}).Validate(even); err != nil {
		t.Errorf("tp=2 with experts of width 4: %v", err)
	}
	b := good
	b.RouterExpertBias = true
	if err := b.Validate(); err != nil || b.BiasRate() != DefaultBiasRate || good.BiasRate() != 0 {
		t.Errorf("router_expert_bias=true: %v, rate %g (off: %g)", err, b.BiasRate(), good.BiasRate())
	}
	if b.RouterBiasUpdateRate = 0.25; b.BiasRate() != 0.25 || b.Canonical().RouterBiasUpdateRate != 0.25 {
		t.Errorf("router_bias_update_rate=0.25: rate %g", b.BiasRate())
	}
}

// ExpertRows under expert parallelism is the least of the capacity's
// bound E·cap and the dropless worst case ep·n·min(k, E/ep): every token
// of every ep rank routed to one rank's experts, each at most
// min(k, E/ep) times.
func TestExpertRowsBounds(t *testing.T) {
	c := Config{Experts: 4, TopK: 2}
	for _, tc := range []struct {
		cf        float64
		n, ep, is int
	}{
		{0, 10, 1, 20},  // dropless, one rank: n·k
		{0, 10, 2, 40},  // 2·10·min(2, 2)
		{0, 10, 4, 40},  // 4·10·min(2, 1)
		{1, 10, 2, 20},  // cap 5: E·cap = 20 < 40
		{10, 10, 2, 40}, // cap 50: E·cap = 200, the dropless 40 is less
		{1, 10, 1, 20},  // one rank: min(n·k, E·cap)
	} {
		c.CapacityFactor = tc.cf
		if got := c.ExpertRows(tc.n, tc.ep, 1); got != tc.is {
			t.Errorf("capacity_factor %g, n %d, ep %d: ExpertRows %d, want %d", tc.cf, tc.n, tc.ep, got, tc.is)
		}
	}
}
