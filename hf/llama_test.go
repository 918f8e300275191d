package hf

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"trellis/device"
	"trellis/model"
	"trellis/ops"
	"trellis/safetensors"
)

// llamaDir is the Hugging Face LlamaForCausalLM directory that
// scripts/torch_llama.py fixture wrote from its PyTorch model (GQA 3:1,
// widths 48 and 40, θ = 500, ε = 1e-5, the head untied).
var llamaDir = filepath.Join("testdata", "llama_hf")

// relErr is max_i |got_i − want_i| / max_i |want_i|.
func relErr(got, want []float32) float64 {
	var d, m float64
	for i := range want {
		d = max(d, math.Abs(float64(got[i])-float64(want[i])))
		m = max(m, math.Abs(float64(want[i])))
	}
	if m == 0 {
		return d
	}
	return d / m
}

func int32s(t *testing.T, f *safetensors.File, name string) []int32 {
	t.Helper()
	b, err := f.Bytes(name)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int32, len(b)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// TestLlamaMatchesPyTorch: the directory PyTorch wrote, read by Read (the
// import path of model.init and trellis sample), trains one step on
// Trellis's Llama with the loss, the probabilities and every parameter's
// gradient of the independent PyTorch implementation written from Hugging
// Face's definition (scripts/torch_llama.py, float64) within 1e-5
// relative, on one and two threads, flash off and on.
func TestLlamaMatchesPyTorch(t *testing.T) {
	hm, err := Read(llamaDir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := hm.Config
	if !cfg.IsLlama() || cfg.KV() != 2 || cfg.Heads != 6 || cfg.FFNWidth() != 40 || cfg.Tied() || cfg.Theta() != 500 {
		t.Fatalf("config %v", cfg)
	}
	f, err := safetensors.ReadFile(filepath.Join("testdata", "llama_fixture.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	const B = 2
	batch := model.Batch{Inputs: int32s(t, f, "inputs"), Targets: int32s(t, f, "targets")}
	want, _ := f.Float32("loss")
	logits, _ := f.Float32("logits")
	for _, threads := range []int{1, 2} {
		for _, flash := range []bool{false, true} {
			k, err := ops.New(ops.Config{Threads: threads})
			if err != nil {
				t.Fatal(err)
			}
			dev := device.New(device.Config{})
			m, err := model.New(model.Options{Model: cfg, Kernels: k, Device: dev, MicroBatch: B, Flash: flash})
			if err != nil {
				t.Fatal(err)
			}
			p, err := model.NewFlatParams(cfg, dev)
			if err != nil {
				t.Fatal(err)
			}
			copy(p.W, hm.W)
			s, err := m.NewStash()
			if err != nil {
				t.Fatal(err)
			}
			loss, err := m.Forward(p, s, batch)
			if err != nil {
				t.Fatal(err)
			}
			if e := math.Abs(float64(loss-want[0])) / float64(want[0]); e > 1e-5 {
				t.Errorf("threads=%d flash=%v: loss %v, PyTorch %v (relative error %.3g)", threads, flash, loss, want[0], e)
			}
			// Trellis's logits of the batch, one sequence at a time.
			got := make([]float32, len(logits))
			T, V := cfg.SeqLen, cfg.Vocab
			for b := 0; b < B; b++ {
				for n := 1; n <= T; n++ {
					ls, err := m.NewStash()
					if err != nil {
						t.Fatal(err)
					}
					if err := m.Logits(p, ls, batch.Inputs[b*T:b*T+n], got[(b*T+n-1)*V:(b*T+n)*V]); err != nil {
						t.Fatal(err)
					}
					ls.Free()
				}
			}
			if e := relErr(got, logits); e > 1e-5 {
				t.Errorf("threads=%d flash=%v: logits: relative error %.3g", threads, flash, e)
			}
			if err := m.Backward(p, s, 1); err != nil {
				t.Fatal(err)
			}
			var worst float64
			for _, u := range m.Layout().Units {
				for _, tn := range u.Tensors {
					g, err := f.Float32("grad." + llamaName(tn.Name))
					if err != nil {
						t.Fatal(err)
					}
					e := relErr(p.G[tn.Offset:tn.Offset+tn.Size], g)
					worst = max(worst, e)
					if e > 1e-5 {
						t.Errorf("threads=%d flash=%v: gradient of %s: relative error %.3g > 1e-5", threads, flash, tn.Name, e)
					}
				}
			}
			t.Logf("threads=%d flash=%v: loss %.7f (PyTorch %.7f), worst gradient error %.3g", threads, flash, loss, want[0], worst)
		}
	}
}

// tinyLlama is the exported model of TestLlamaExportMatchesPyTorch:
// non-power-of-two widths, 4 query heads per key/value head, untied.
func tinyLlama() model.Config {
	return model.Config{Arch: "llama", Layers: 2, Hidden: 64, Heads: 8, KVHeads: 2, FFN: 88, SeqLen: 16, Vocab: 67, RopeTheta: 1000}
}

var llamaTokens = []int32{3, 66, 0, 17, 42, 5, 9, 60, 1, 33, 12, 50, 7, 28, 64, 2}

// TestLlamaExportMatchesPyTorch: Write's LlamaForCausalLM directory, loaded
// by scripts/torch_llama.py (Hugging Face's names, its rotate_half RoPE,
// repeat_kv), gives Trellis's logits within 1e-5 relative. The fixture
// records the SHA-256 of the model.safetensors it was computed from, so a
// change in the export's bytes fails here until it is regenerated with
// -torch (go test ./hf -run TestLlamaExportMatchesPyTorch -torch).
func TestLlamaExportMatchesPyTorch(t *testing.T) {
	cfg := tinyLlama()
	w := weights(t, cfg)
	dir := written(t, cfg, w)
	want, f := torchLogits(t, dir, "llama_torch_logits.safetensors", "TestLlamaExportMatchesPyTorch", llamaTokens, "../scripts/torch_llama.py", "logits")
	got := trellisLogits(t, cfg, w, llamaTokens)
	if len(got) != len(want) {
		t.Fatalf("%d logits, fixture %d", len(got), len(want))
	}
	if e := relErr(got, want); e > 1e-5 {
		t.Fatalf("logits: relative error %.3g between Trellis and PyTorch, want ≤ 1e-5", e)
	}
	t.Logf("logits: relative error %.3g (PyTorch %s)", relErr(got, want), f.Metadata()["torch"])
}

// TestLlamaExportIsHuggingFaces: the directory PyTorch wrote, read and
// written again, holds the same tensors bit for bit under the same names
// and shapes, and its config.json reads back as the same model; the
// export's config.json carries every field that decides the architecture.
func TestLlamaExportIsHuggingFaces(t *testing.T) {
	hm, err := Read(llamaDir)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := Write(dir, hm, safetensors.F32); err != nil {
		t.Fatal(err)
	}
	a, err := safetensors.ReadFile(filepath.Join(llamaDir, WeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	b, err := safetensors.ReadFile(filepath.Join(dir, WeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Names(), b.Names()) {
		t.Fatalf("tensors %v, PyTorch's %v", b.Names(), a.Names())
	}
	for _, n := range a.Names() {
		ia, _ := a.Info(n)
		ib, _ := b.Info(n)
		ba, _ := a.Bytes(n)
		bb, _ := b.Bytes(n)
		if !slices.Equal(ia.Shape, ib.Shape) || string(ba) != string(bb) {
			t.Errorf("%s: shape %v, PyTorch's %v (or its values differ)", n, ib.Shape, ia.Shape)
		}
	}
	back, _, err := ReadConfig(dir)
	if err != nil || back != hm.Config {
		t.Fatalf("config.json reads back as %v (%v), want %v", back, err, hm.Config)
	}
	var js map[string]any
	raw, _ := os.ReadFile(filepath.Join(dir, ConfigFile))
	if err := json.Unmarshal(raw, &js); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]any{"model_type": "llama", "hidden_size": 48.0, "num_attention_heads": 6.0, "num_key_value_heads": 2.0,
		"intermediate_size": 40.0, "head_dim": 8.0, "rms_norm_eps": 1e-5, "rope_theta": 500.0, "tie_word_embeddings": false,
		"hidden_act": "silu", "attention_bias": false, "mlp_bias": false, "max_position_embeddings": 16.0} {
		if js[k] != v {
			t.Errorf("config.json %s = %v, want %v", k, js[k], v)
		}
	}
	if arch, _ := js["architectures"].([]any); len(arch) != 1 || arch[0] != "LlamaForCausalLM" {
		t.Errorf("config.json architectures = %v", js["architectures"])
	}
}

// TestLlamaRoundTrip: a tied and an untied Llama survive Write and Read in
// every dtype (the tied one writes no lm_head).
func TestLlamaRoundTrip(t *testing.T) {
	for _, tied := range []bool{false, true} {
		cfg := tinyLlama()
		cfg.TieEmbeddings = tied
		w := weights(t, cfg)
		for _, dt := range []safetensors.DType{safetensors.F32, safetensors.BF16} {
			dir := t.TempDir()
			if err := Write(dir, Model{Config: cfg, W: w}, dt); err != nil {
				t.Fatal(err)
			}
			m, err := Read(dir)
			if err != nil {
				t.Fatal(err)
			}
			if m.Config != cfg.Canonical() {
				t.Fatalf("tied=%v %s: config %v, want %v", tied, dt, m.Config, cfg)
			}
			if e := relErr(m.W, w); e > 4e-3 || (dt == safetensors.F32 && e != 0) {
				t.Fatalf("tied=%v %s: weights differ by %.3g", tied, dt, e)
			}
			f, _ := safetensors.ReadFile(filepath.Join(dir, WeightsFile))
			if has := slices.Contains(f.Names(), "lm_head.weight"); has == tied {
				t.Errorf("tied=%v: lm_head.weight written: %v", tied, has)
			}
		}
	}
}

// TestLlamaReadRefuses: what Trellis's Llama does not compute is refused,
// naming the field or the tensor.
func TestLlamaReadRefuses(t *testing.T) {
	js, err := os.ReadFile(filepath.Join(llamaDir, ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	wb, err := os.ReadFile(filepath.Join(llamaDir, WeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	with := func(t *testing.T, old, new string, weights []byte) string {
		d := t.TempDir()
		if err := os.WriteFile(filepath.Join(d, ConfigFile), []byte(strings.Replace(string(js), old, new, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, WeightsFile), weights, 0o644); err != nil {
			t.Fatal(err)
		}
		return d
	}
	for _, c := range []struct{ name, old, new, want string }{
		{"activation", `"hidden_act": "silu"`, `"hidden_act": "gelu"`, `hidden_act="gelu"`},
		{"biases", `"attention_bias": false`, `"attention_bias": true`, "Trellis's Llama has no biases"},
		{"rope scaling", `"rope_theta": 500.0,`, `"rope_theta": 500.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0},`, "rope_scaling="},
		{"kv heads", `"num_key_value_heads": 2`, `"num_key_value_heads": 4`, "model.kv_heads=4 does not divide model.heads=6"},
		{"head dim", `"num_key_value_heads": 2,`, `"num_key_value_heads": 2, "head_dim": 16,`, "head_dim=16"},
		{"tied", `"tie_word_embeddings": false`, `"tie_word_embeddings": true`, "lm_head.weight differs from embed_tokens.weight"},
		{"attention dropout", `"rms_norm_eps"`, `"attention_dropout": 0.1, "rms_norm_eps"`, "attention_dropout=0.1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(string(js), c.old) {
				t.Fatalf("config.json lacks %q", c.old)
			}
			_, err := Read(with(t, c.old, c.new, wb))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to contain %q", err, c.want)
			}
		})
	}
}
