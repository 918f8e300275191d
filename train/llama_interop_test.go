package train

import (
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"trellis/device"
	"trellis/hf"
	"trellis/model"
	"trellis/ops"
	"trellis/plan"
	"trellis/safetensors"
)

// TestLlamaHuggingFaceInterop: a Llama checkpoint of a 3D plan (its
// untied head split over tp and living on the last stage) is exported as
// a LlamaForCausalLM directory that reads back as the same weights; named
// in [model] init it starts a run from them under one device and under a
// pipeline × tensor plan with the same losses (below a random start's);
// another shape is refused by name; trellis sample gives the same text
// from the checkpoint and from its export; and, where /usr/bin/python3
// has torch, the independent PyTorch Llama (scripts/torch_llama.py) loads
// the export and gives Trellis's logits within 1e-5 relative.
func TestLlamaHuggingFaceInterop(t *testing.T) {
	_, back, dir, j := hfExport(t, llamaJob("pp=2,tp=2,dp=2,zero=1", 3), "pp=2,tp=2,sp=on,schedule=zb-h1")
	bad := j
	bad.Model.KVHeads = 3
	if err := bad.Check(); err == nil || !strings.Contains(err.Error(), "kv_heads=2, the job's model.kv_heads=3") {
		t.Fatalf("another shape: %v", err)
	}

	torchLogits(t, back, dir)
}

// hfExport is the common part of the Hugging Face interop tests: j
// trains 6 steps into a checkpoint, whose export reads back as the same
// weights and model; j started from the export (3 steps) on one device
// and under plan gives the same losses within 1e-5, well below the random
// start's; sampling the checkpoint and the export gives the same text. It
// returns the checkpoint, the export read back, its directory and the job
// that starts from it.
func hfExport(t *testing.T, j Job, plan string) (ws Weights, back hf.Model, dir string, from Job) {
	t.Helper()
	j.Train.Steps = 6
	ck := t.TempDir()
	first := runJob(t, j, ck, "", 0)
	ws, err := LoadWeights(ck, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(t.TempDir(), "hf")
	if err := hf.Write(dir, hf.Model{Config: ws.Model, W: ws.W, Meta: map[string]string{hf.MetaTokenizer: ws.Tokenizer}}, safetensors.F32); err != nil {
		t.Fatal(err)
	}
	if back, err = hf.Read(dir); err != nil {
		t.Fatal(err)
	}
	if err := sameBits(back.W, ws.W); err != nil || sameShape(j.Model, back.Config, "export") != nil {
		t.Fatalf("the export reads back differently: %v (%v)", err, back.Config)
	}
	j.Model.Init, j.Train.Steps = dir, 3
	j.Parallel.Plan = "dp=1"
	one := runJob(t, j, "", "", 0)
	j.Parallel.Plan = plan
	split := runJob(t, j, "", "", 0)
	for i := range one.losses {
		if d := math.Abs(one.losses[i]-split.losses[i]) / one.losses[i]; d > 1e-5 {
			t.Fatalf("step %d: dp=1 loss %v, %s %v", i+1, one.losses[i], plan, split.losses[i])
		}
	}
	if one.losses[0] > first.losses[0]-0.3 {
		t.Fatalf("first loss from the exported weights %v, from random %v: the weights were not loaded", one.losses[0], first.losses[0])
	}
	var texts []string
	for _, path := range []string{ck, dir} {
		txt, err := SampleCheckpoint(SampleOptions{Checkpoint: path, Prompt: "It is", Tokens: 20, Temperature: 0.8, TopK: 10, Seed: 3, Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, txt)
	}
	if texts[0] != texts[1] || texts[0] == "" {
		t.Fatalf("sample of the checkpoint %q, of its export %q", texts[0], texts[1])
	}
	return ws, back, dir, j
}

// torchLogits runs scripts/torch_llama.py on the export in dir (skipped
// without /usr/bin/python3 and torch) and holds Trellis's logits of a
// sequence to PyTorch's within 1e-5 relative.
func torchLogits(t *testing.T, m hf.Model, dir string) {
	t.Helper()
	if err := exec.Command("/usr/bin/python3", "-c", "import torch").Run(); err != nil {
		t.Log("no /usr/bin/python3 with torch: the PyTorch check of the export is skipped (hf's fixture holds the export format)")
		return
	}
	scriptLogits(t, m, dir, "../scripts/torch_llama.py")
}

// scriptLogits runs a reference script's logits command on the export in
// dir and holds Trellis's logits of a sequence to the script's within
// 1e-5 relative; it returns the fixture the script wrote.
func scriptLogits(t *testing.T, m hf.Model, dir, script string) *safetensors.File {
	t.Helper()
	cfg := m.Config
	tokens := make([]int32, cfg.SeqLen)
	strs := make([]string, len(tokens))
	for i := range tokens {
		tokens[i] = int32((i*37 + 11) % cfg.Vocab)
		strs[i] = strconv.Itoa(int(tokens[i]))
	}
	out := filepath.Join(t.TempDir(), "torch.safetensors")
	cmd := exec.Command("/usr/bin/python3", script, "logits", "--model", dir, "--tokens", strings.Join(strs, ","), "--out", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	f, err := safetensors.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := f.Float32("logits")
	k, err := ops.New(ops.Config{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	dev := device.New(device.Config{})
	fp, err := model.NewFlatParams(cfg, dev)
	if err != nil {
		t.Fatal(err)
	}
	copy(fp.W, m.W)
	g, err := model.New(model.Options{Model: cfg, Kernels: k, Device: dev, MicroBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	st, err := g.NewStash()
	if err != nil {
		t.Fatal(err)
	}
	got := make([]float32, len(tokens)*cfg.Vocab)
	for n := 1; n <= len(tokens); n++ {
		if err := g.Logits(fp, st, tokens[:n], got[(n-1)*cfg.Vocab:n*cfg.Vocab]); err != nil {
			t.Fatal(err)
		}
	}
	var d, mx float64
	for i := range want {
		d, mx = max(d, math.Abs(float64(got[i]-want[i]))), max(mx, math.Abs(float64(want[i])))
	}
	if d/mx > 1e-5 {
		t.Fatalf("the export's logits in %s differ from Trellis's by %.3g relative", script, d/mx)
	}
	t.Logf("the export in %s: logits within %.3g relative of Trellis's", script, d/mx)
	return f
}

// The planner's Hugging Face reader (plan.ParseHFConfig) and the engine's
// (hf.ParseModelConfig, what model.init and trellis sample read) agree on
// the same config.json: PyTorch's Llama fixture, Trellis's own exports
// (tied and untied Llama, GPT-2), and a Llama 3 8B config.json as
// transformers writes it; the engine runs what the planner reads
// (plan.EngineRefusals is empty).
func TestLlamaConfigReadersAgree(t *testing.T) {
	files := map[string][]byte{}
	b, err := os.ReadFile(filepath.Join("..", "hf", "testdata", "llama_hf", hf.ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	files["pytorch fixture"] = b
	for name, cfg := range map[string]model.Config{
		"untied llama": llamaJob("", 3).Model,
		"tied llama":   {Arch: "llama", Layers: 2, Hidden: 32, Heads: 4, SeqLen: 16, Vocab: 300, TieEmbeddings: true, NormEps: 1e-6},
		"gpt2":         tinyJob("").Model,
	} {
		dir := t.TempDir()
		lay := cfg.Layout()
		if err := hf.Write(dir, hf.Model{Config: cfg, W: make([]float32, lay.Size)}, safetensors.F32); err != nil {
			t.Fatal(err)
		}
		if files[name], err = os.ReadFile(filepath.Join(dir, hf.ConfigFile)); err != nil {
			t.Fatal(err)
		}
	}
	files["llama3-8b (transformers)"] = []byte(`{"architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
		"bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
		"intermediate_size": 14336, "max_position_embeddings": 8192, "mlp_bias": false, "model_type": "llama",
		"num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
		"rope_scaling": null, "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
		"transformers_version": "4.40.0.dev0", "use_cache": true, "vocab_size": 128256}`)
	for name, b := range files {
		t.Run(name, func(t *testing.T) {
			pm, err := plan.ParseHFConfig(b, name)
			if err != nil {
				t.Fatal(err)
			}
			ec, err := hf.ParseModelConfig(b)
			if err != nil {
				t.Fatal(err)
			}
			em := planModel(ec)
			type shape struct {
				Family                                     plan.Family
				Layers, Hidden, Heads, KV, HD, FFN, V, Seq int
				Tied, AttnBias, MLPBias                    bool
			}
			of := func(m plan.Model) shape {
				return shape{m.Family, m.Layers, m.Hidden, m.Heads, m.KVHeads, m.HD(), m.FFN, m.Vocab, m.MaxSeq, m.Tied, m.AttnBias, m.MLPBias}
			}
			if of(pm) != of(em) {
				t.Errorf("planner reads %+v, engine %+v", of(pm), of(em))
			}
			if bad := plan.EngineRefusals(pm, plan.Plan{TP: 1, PP: 1, DP: 1, CP: 1, Precision: plan.BF16}); len(bad) > 0 {
				t.Errorf("the engine refuses what the planner read: %v", bad)
			}
			if ec.NumParams() != int(pm.Params()) {
				t.Errorf("parameters: engine %d, planner %d", ec.NumParams(), pm.Params())
			}
		})
	}
}
