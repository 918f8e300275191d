package plan

import (
	"strings"
	"testing"
)

// The published parameter counts: Meta's Llama 3 model cards and
// safetensors indexes, and GPT-2 small as Hugging Face loads it.
func TestPresetParamsExact(t *testing.T) {
	for _, c := range []struct {
		name string
		want int64
	}{
		{"gpt2", 124_439_808},
		{"llama3-8b", 8_030_261_248},
		{"llama3-70b", 70_553_706_496},
		{"llama3-405b", 405_853_388_800},
		// GPT-3 175B with GPT-2's vocabulary and tied embeddings:
		// 96·(12h² + 13h) + (50257 + 2048)·h + 2h, h = 12288.
		{"gpt3-175b", 96*(12*12288*12288+13*12288) + (50257+2048)*12288 + 2*12288},
	} {
		m, err := ModelPreset(c.name)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Params(); got != c.want {
			t.Errorf("%s: Params = %d, want %d", c.name, got, c.want)
		}
	}
}

// Narayanan et al. 2021 count P = 12·l·h²·(1 + 13/(12h) + (V+s)/(12·l·h));
// their Table 1 rounds it to one decimal in billions.
func TestMegatronPresetsMatchTable1(t *testing.T) {
	for _, c := range []struct {
		name    string
		billion float64
	}{{"megatron-1.7b", 1.7}, {"megatron-3.6b", 3.6}, {"megatron-7.5b", 7.5}, {"megatron-18.4b", 18.4},
		{"megatron-39.1b", 39.1}, {"megatron-76.1b", 76.1}, {"megatron-145.6b", 145.6}, {"megatron-310.1b", 310.1},
		{"megatron-530b", 529.6}, {"megatron-1t", 1008.0}} {
		m, _ := ModelPreset(c.name)
		l, h := int64(m.Layers), int64(m.Hidden)
		// 12lh²(1 + 13/(12h) + (V+s)/(12lh)) = 12lh² + 13lh + (V+s)h, plus
		// the final LayerNorm's 2h that the formula omits.
		formula := 12*l*h*h + 13*l*h + (51200+2048)*h
		if got := m.Params(); got != formula+2*h {
			t.Errorf("%s: Params = %d, formula %d", c.name, got, formula)
		}
		if r := float64(int(float64(m.Params())/1e8+0.5)) / 10; r != c.billion {
			t.Errorf("%s: %.1fB, Table 1 says %.1fB", c.name, r, c.billion)
		}
	}
}

const llama3_8bConfig = `{
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 8192,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.40.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
}`

const gpt2Config = `{
  "activation_function": "gelu_new",
  "architectures": ["GPT2LMHeadModel"],
  "attn_pdrop": 0.1,
  "bos_token_id": 50256,
  "embd_pdrop": 0.1,
  "eos_token_id": 50256,
  "initializer_range": 0.02,
  "layer_norm_epsilon": 1e-05,
  "model_type": "gpt2",
  "n_ctx": 1024,
  "n_embd": 768,
  "n_head": 12,
  "n_layer": 12,
  "n_positions": 1024,
  "resid_pdrop": 0.1,
  "vocab_size": 50257
}`

func TestParseHFConfig(t *testing.T) {
	for _, c := range []struct {
		name, data string
		preset     string
	}{{"llama3-8b", llama3_8bConfig, "llama3-8b"}, {"gpt2", gpt2Config, "gpt2"}} {
		m, err := ParseHFConfig([]byte(c.data), c.name)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := ModelPreset(c.preset)
		if m.Params() != p.Params() {
			t.Errorf("%s: config.json gives %d params, preset %d", c.name, m.Params(), p.Params())
		}
		p.MaxSeq = m.MaxSeq
		if m != p {
			t.Errorf("%s: config.json model %+v differs from preset %+v", c.name, m, p)
		}
	}
}

func TestParseHFConfigVariants(t *testing.T) {
	// A Llama with biases on attention and MLP, tied embeddings, explicit head_dim.
	m, err := ParseHFConfig([]byte(`{"model_type":"llama","hidden_size":64,"num_hidden_layers":2,
		"num_attention_heads":4,"num_key_value_heads":2,"head_dim":32,"intermediate_size":128,"vocab_size":100,
		"attention_bias":true,"mlp_bias":true,"tie_word_embeddings":true}`), "x")
	if err != nil {
		t.Fatal(err)
	}
	// per layer: q 64·128, k,v 64·64 each, o 128·64, MLP 3·64·128, norms 2·64,
	// biases: q 128 + k 64 + v 64 + o 64 + gate 128 + up 128 + down 64.
	layer := int64(64*128 + 2*64*64 + 128*64 + 3*64*128 + 2*64 + 128 + 64 + 64 + 64 + 128 + 128 + 64)
	want := 100*64 + 2*layer + 64
	if m.Params() != want {
		t.Fatalf("Params = %d, want %d", m.Params(), want)
	}
}

func TestParseHFConfigErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"model_type":"bert"}`, `model_type "bert": want gpt2 or llama`},
		{`{"model_type":"gpt2","n_layer":2,"n_head":2,"vocab_size":10,"n_positions":8}`, "n_embd is missing"},
		{`{"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":10}`, "intermediate_size is missing"},
		{`{"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":3,"intermediate_size":8,"vocab_size":10}`, "kv_heads=3 does not divide heads=4"},
		{`{"model_type":"gpt2","n_embd":10,"n_layer":2,"n_head":3,"vocab_size":10,"n_positions":8}`, "heads=3 does not divide hidden=10"},
		{`{"model_type":"gpt2","n_embd":-1,"n_layer":2,"n_head":2,"vocab_size":10,"n_positions":8}`, "n_embd=-1"},
		{`{"model_type":"gpt2","n_embd":16777216,"n_layer":16777216,"n_head":2,"vocab_size":10,"n_positions":8}`, "parameters: more than"},
		{`not json`, "config.json"},
	} {
		_, err := ParseHFConfig([]byte(c.in), "x")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseHFConfig(%s) = %v, want %q", c.in, err, c.want)
		}
	}
}

// FuzzParseHFConfig: no input panics, and an accepted model validates and
// has a positive parameter count.
func FuzzParseHFConfig(f *testing.F) {
	f.Add([]byte(llama3_8bConfig))
	f.Add([]byte(gpt2Config))
	f.Add([]byte(`{"model_type":"llama","hidden_size":1,"num_hidden_layers":1,"num_attention_heads":1,"intermediate_size":1,"vocab_size":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseHFConfig(data, "fuzz")
		if err != nil {
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("accepted model does not validate: %v", err)
		}
		if m.Params() <= 0 {
			t.Fatalf("accepted model has %d params", m.Params())
		}
	})
}

func TestModelPresetsValidate(t *testing.T) {
	for _, n := range ModelPresetNames() {
		m, _ := ModelPreset(n)
		if err := m.Validate(); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	if _, err := ModelPreset("gpt5"); err == nil || !strings.Contains(err.Error(), "llama3-8b") {
		t.Errorf("unknown preset error should list the presets: %v", err)
	}
}
