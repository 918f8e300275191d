package plan

import (
	"encoding/json"
	"math"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// publishedCount parses a published parameter count ("46.7B", "1T") into
// its value and the unit of its last digit.
func publishedCount(t *testing.T, s string) (v, unit float64) {
	t.Helper()
	scale := map[byte]float64{'B': 1e9, 'T': 1e12}[s[len(s)-1]]
	num := s[:len(s)-1]
	x, err := strconv.ParseFloat(num, 64)
	if err != nil || scale == 0 {
		t.Fatalf("published count %q", s)
	}
	unit = scale
	if i := strings.IndexByte(num, '.'); i >= 0 {
		unit = scale * math.Pow(10, -float64(len(num)-i-1))
	}
	return x * scale, unit
}

// TestMoEPresetParams holds the MoE presets' parameter counts, total and
// active, to the published figures: within 1%, or within one unit of the
// figure's last digit where it is published to fewer digits than 1% needs
// (model cards round or truncate: Qwen3-30B-A3B's 3.353B activated is
// published as 3.3B, Kimi K2's 1.026T as 1T). The active count's
// convention follows each publisher: Mistral AI and Qwen count the
// embedding and the output layer, DeepSeek, Moonshot and OpenAI leave out
// the input embedding.
func TestMoEPresetParams(t *testing.T) {
	for _, c := range []struct {
		model, total, active string
		noInputEmbedding     bool
		source               string
	}{
		{"mixtral-8x7b", "46.7B", "12.9B", false, "Mistral AI, Mixtral of experts (2023-12-11)"},
		{"mixtral-8x22b", "141B", "39B", false, "Mistral AI, Cheaper, Better, Faster, Stronger (2024-04-17)"},
		{"qwen3-30b-a3b", "30.5B", "3.3B", false, "Qwen/Qwen3-30B-A3B model card"},
		{"qwen3-235b-a22b", "235B", "22B", false, "Qwen/Qwen3-235B-A22B model card"},
		{"deepseek-v3", "671B", "37B", true, "DeepSeek-V3 technical report, abstract and §4.2"},
		{"kimi-k2", "1T", "32B", true, "moonshotai/Kimi-K2-Instruct model card"},
		{"deepseek-v2-lite", "15.7B", "2.4B", true, "DeepSeek-V2 report, appendix B (DeepSeek-V2-Lite)"},
		{"gpt-oss-120b", "116.83B", "5.13B", true, "OpenAI gpt-oss model card, table 1"},
	} {
		m, err := ModelPreset(c.model)
		if err != nil {
			t.Fatal(err)
		}
		active := m.ActiveParams()
		if c.noInputEmbedding {
			active -= int64(m.Vocab) * int64(m.Hidden)
		}
		for _, q := range []struct {
			what, pub string
			got       int64
		}{{"total", c.total, m.Params()}, {"active", c.active, active}} {
			v, unit := publishedCount(t, q.pub)
			diff := math.Abs(float64(q.got) - v)
			if diff > math.Max(0.01*v, unit) {
				t.Errorf("%s: %s params %.4gB, published %s (%s): off by %.2f%%", c.model, q.what, float64(q.got)/1e9, q.pub, c.source, 100*diff/v)
			}
		}
	}
	if m, _ := ModelPreset("deepseek-v3"); m.MTPParams() < 11e9 || m.MTPParams() > 12e9 {
		// DeepSeek's README: 685B on Hugging Face, of which 671B main model, 14B MTP (with its own embedding and head
		// shared, 11.6B of them new weights).
		t.Errorf("deepseek-v3 MTP module: %d params, want about 11.6B", m.MTPParams())
	}
}

// TestParseHFConfigMoE reads each MoE preset's published config.json
// (testdata/hf, the fields as Hugging Face serves them, auto_map and
// quantization_config left out) into the preset.
func TestParseHFConfigMoE(t *testing.T) {
	for _, name := range []string{"mixtral-8x7b", "mixtral-8x22b", "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3", "kimi-k2", "deepseek-v2-lite", "gpt-oss-120b"} {
		data, err := os.ReadFile("testdata/hf/" + name + ".json")
		if err != nil {
			t.Fatal(err)
		}
		m, err := ParseHFConfig(data, name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		p, _ := ModelPreset(name)
		if !reflect.DeepEqual(m, p) {
			t.Errorf("%s: config.json model\n%+v %+v %+v\ndiffers from preset\n%+v %+v %+v", name, m, m.MoE, m.MLA, p, p.MoE, p.MLA)
		}
	}
}

func TestParseHFConfigMoEErrors(t *testing.T) {
	base := func(t *testing.T, name string) map[string]any {
		data, err := os.ReadFile("testdata/hf/" + name + ".json")
		if err != nil {
			t.Fatal(err)
		}
		var c map[string]any
		if err := json.Unmarshal(data, &c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, c := range []struct {
		from string
		set  map[string]any
		want string
	}{
		{"mixtral-8x7b", map[string]any{"sliding_window": 4096}, "sliding_window=4096"},
		{"mixtral-8x7b", map[string]any{"num_experts_per_tok": 9}, "num_experts_per_tok=9 exceeds the 8 experts"},
		{"mixtral-8x7b", map[string]any{"num_local_experts": nil}, "num_local_experts is missing"},
		{"qwen3-30b-a3b", map[string]any{"mlp_only_layers": []int{3}}, "mlp_only_layers=[3]"},
		{"qwen3-30b-a3b", map[string]any{"moe_intermediate_size": nil}, "moe_intermediate_size is missing"},
		{"deepseek-v3", map[string]any{"scoring_func": "tanh"}, `scoring_func "tanh": want softmax or sigmoid`},
		{"deepseek-v3", map[string]any{"kv_lora_rank": nil}, "kv_lora_rank is missing"},
		{"deepseek-v3", map[string]any{"n_group": 3}, "moe.groups=3"},
		{"deepseek-v3", map[string]any{"capacity_factor": -1}, "capacity_factor=-1"},
		{"gpt-oss-120b", map[string]any{"layer_types": []string{"full_attention"}}, `layer_types[0]="full_attention"`},
		{"gpt-oss-120b", map[string]any{"model_type": "bert"}, `model_type "bert": want gpt2 or llama`},
	} {
		m := base(t, c.from)
		for k, v := range c.set {
			if v == nil {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		data, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		_, err = ParseHFConfig(data, "x")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s with %v: %v, want %q", c.from, c.set, err, c.want)
		}
	}
}

// TestMoEModelValidate: the MoE and MLA fields' errors name the field and
// the rule.
func TestMoEModelValidate(t *testing.T) {
	for _, c := range []struct {
		edit func(m *Model)
		want string
	}{
		{func(m *Model) { m.MoE.TopK = 0 }, "moe.top_k=0: must be at least 1"},
		{func(m *Model) { m.MoE.TopK = 300 }, "moe.top_k=300 exceeds moe.experts=256"},
		{func(m *Model) { m.MoE.DenseFirst = 62 }, "moe.dense_first=62 exceeds layers=61"},
		{func(m *Model) { m.MoE.Score = "relu" }, `moe.score="relu": want softmax or sigmoid`},
		{func(m *Model) { m.MoE.GroupTopK = 9 }, "moe.groups=8, group_top_k=9"},
		{func(m *Model) { m.MoE.CapacityFactor = math.NaN() }, "moe.capacity_factor=NaN"},
		{func(m *Model) { m.MoE = &MoE{TopK: 2} }, "moe fields set with moe.experts=0"},
		{func(m *Model) { m.KVHeads = 8 }, "mla needs kv_heads=heads"},
		{func(m *Model) { m.MLA.QKRope = 0 }, "mla q_rank=1536, qk_nope=128, qk_rope=0, v=128"},
		{func(m *Model) { m.MTP = 9 }, "mtp=9"},
		{func(m *Model) { m.Family = GPT }, "experts need the llama family"},
	} {
		m, _ := ModelPreset("deepseek-v3")
		c.edit(&m)
		err := m.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate() = %v, want %q", err, c.want)
		}
	}
}

// FuzzParseHFConfigMoE: no MoE config panics, and an accepted one
// validates with positive total and active counts, active ≤ total.
func FuzzParseHFConfigMoE(f *testing.F) {
	for _, name := range []string{"mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3", "deepseek-v2-lite", "gpt-oss-120b"} {
		data, err := os.ReadFile("testdata/hf/" + name + ".json")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseHFConfig(data, "fuzz")
		if err != nil {
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("accepted model does not validate: %v", err)
		}
		if m.Params() <= 0 || m.ActiveParams() <= 0 || m.ActiveParams() > m.Params() {
			t.Fatalf("accepted model has %d params, %d active", m.Params(), m.ActiveParams())
		}
	})
}
