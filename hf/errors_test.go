package hf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"trellis/model"
	"trellis/safetensors"
)

// TestReadRefuses: every input Read cannot load faithfully is one error
// naming the file, the tensor or the config field.
func TestReadRefuses(t *testing.T) {
	cfg := tiny()
	w := weights(t, cfg)
	good := t.TempDir()
	if err := Write(good, Model{Config: cfg, W: w}, safetensors.F32); err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.ReadFile(filepath.Join(good, WeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	// rewrite returns a directory whose tensors are edit(good's) and whose
	// config.json is good's with the replacements applied.
	rewrite := func(t *testing.T, edit func([]safetensors.Tensor) []safetensors.Tensor, cfgOld, cfgNew string) string {
		dir := t.TempDir()
		var ts []safetensors.Tensor
		for _, n := range f.Names() {
			info, _ := f.Info(n)
			b, _ := f.Bytes(n)
			ts = append(ts, safetensors.Tensor{Name: n, DType: info.DType, Shape: info.Shape, Data: b})
		}
		if edit != nil {
			ts = edit(ts)
		}
		if err := safetensors.WriteFile(filepath.Join(dir, WeightsFile), ts, nil); err != nil {
			t.Fatal(err)
		}
		js, _ := os.ReadFile(filepath.Join(good, ConfigFile))
		s := strings.Replace(string(js), cfgOld, cfgNew, 1)
		if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	drop := func(name string) func([]safetensors.Tensor) []safetensors.Tensor {
		return func(ts []safetensors.Tensor) []safetensors.Tensor {
			var out []safetensors.Tensor
			for _, x := range ts {
				if x.Name != name {
					out = append(out, x)
				}
			}
			return out
		}
	}
	add := func(x safetensors.Tensor) func([]safetensors.Tensor) []safetensors.Tensor {
		return func(ts []safetensors.Tensor) []safetensors.Tensor { return append(ts, x) }
	}
	head := func(scale float32) safetensors.Tensor {
		v, _ := f.Float32("transformer.wte.weight")
		for i := range v {
			v[i] *= scale
		}
		return safetensors.FromFloat32("lm_head.weight", []int{cfg.Vocab, cfg.Hidden}, v)
	}
	for _, c := range []struct {
		name, want string
		dir        func(t *testing.T) string
	}{
		{"missing tensor", "missing tensor transformer.h.1.ln_2.bias", func(t *testing.T) string {
			return rewrite(t, drop("transformer.h.1.ln_2.bias"), "", "")
		}},
		{"extra tensor", "tensor transformer.h.0.attn.rotary is not part of a GPT-2", func(t *testing.T) string {
			return rewrite(t, add(safetensors.FromFloat32("transformer.h.0.attn.rotary", []int{2}, []float32{1, 2})), "", "")
		}},
		{"untied head", "lm_head.weight differs from wte", func(t *testing.T) string { return rewrite(t, add(head(2)), "", "") }},
		{"other model shape", "has shape [48 144], config.json implies [96 288]", func(t *testing.T) string {
			return rewrite(t, nil, `"n_embd": 48`, `"n_embd": 96`)
		}},
		{"activation", `activation_function="relu"`, func(t *testing.T) string {
			return rewrite(t, nil, `"gelu_new"`, `"relu"`)
		}},
		{"layer norm epsilon", "layer_norm_epsilon=1e-06", func(t *testing.T) string {
			return rewrite(t, nil, `"layer_norm_epsilon": 0.00001`, `"layer_norm_epsilon": 0.000001`)
		}},
		{"heads", "model.heads=5 does not divide model.hidden=48", func(t *testing.T) string {
			return rewrite(t, nil, `"n_head": 3`, `"n_head": 5`)
		}},
		{"no config", "config.json", func(t *testing.T) string {
			d := rewrite(t, nil, "", "")
			os.Remove(filepath.Join(d, ConfigFile))
			return d
		}},
		{"truncated weights", "model.safetensors", func(t *testing.T) string {
			d := rewrite(t, nil, "", "")
			p := filepath.Join(d, WeightsFile)
			st, _ := os.Stat(p)
			os.Truncate(p, st.Size()-5)
			return d
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Read(c.dir(t))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to contain %q", err, c.want)
			}
		})
	}
	// A tied head equal to wte, and names without the "transformer."
	// prefix, are accepted.
	ok := rewrite(t, func(ts []safetensors.Tensor) []safetensors.Tensor {
		for i := range ts {
			ts[i].Name = strings.TrimPrefix(ts[i].Name, Prefix)
		}
		return append(ts, head(1))
	}, "", "")
	if m, err := Read(filepath.Join(ok, WeightsFile)); err != nil || m.W[len(m.W)-1] != w[len(w)-1] {
		t.Fatalf("unprefixed names with a tied lm_head: %v", err)
	}
}

// TestWriteRefusesExperts: an MoE model no Hugging Face architecture
// computes exactly is refused by Write, naming the key and the
// architecture it would need, and nothing is written.
func TestWriteRefusesExperts(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*model.Config)
		want string
	}{
		{"sigmoid router", func(c *model.Config) { c.RouterScore = "sigmoid" }, `model.router_score="sigmoid": Qwen2MoeForCausalLM routes by softmax; Hugging Face's sigmoid router with normalised top-k gates is DeepseekV3ForCausalLM's, which needs multi-head latent attention`},
		{"shared experts", func(c *model.Config) { c.SharedExperts = 1 }, "model.shared_experts=1: Qwen2MoeForCausalLM gates its shared expert by sigmoid(x·w)"},
		{"capacity", func(c *model.Config) { c.CapacityFactor = 1.25 }, "model.capacity_factor=1.25: Qwen2MoeForCausalLM is dropless"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := model.Config{Arch: "llama", Layers: 1, Hidden: 8, Heads: 2, SeqLen: 4, Vocab: 11, Experts: 2, TopK: 1, ExpertFFN: 4}
			c.edit(&cfg)
			dir := filepath.Join(t.TempDir(), "out")
			err := Write(dir, Model{Config: cfg, W: make([]float32, cfg.NumParams())}, safetensors.F32)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Write: %v, want it to contain %q", err, c.want)
			}
			if _, err := os.Stat(dir); err == nil {
				t.Errorf("a refused export wrote %s", dir)
			}
		})
	}
}
