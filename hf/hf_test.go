package hf

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"trellis/device"
	"trellis/model"
	"trellis/ops"
	"trellis/safetensors"
	"trellis/tensor"
)

var regen = flag.Bool("torch", false, "run scripts/hf_gpt2.py (needs python3-torch) and rewrite testdata/torch_logits.safetensors")

// tiny is a model with shapes that are not powers of two, so that a
// transposition or a swapped dimension cannot go unnoticed.
func tiny() model.Config {
	return model.Config{Layers: 2, Hidden: 48, Heads: 3, SeqLen: 16, Vocab: 67}
}

// weights is GPT-2's initialisation plus a deterministic ripple, so that
// biases and LayerNorm parameters are not 0 and 1 and their placement is
// tested too.
func weights(t *testing.T, cfg model.Config) []float32 {
	t.Helper()
	w := make([]float32, cfg.Layout().Size)
	if err := model.InitRange(cfg, 7, w, 0, len(w)); err != nil {
		t.Fatal(err)
	}
	for i := range w {
		w[i] += float32(0.01 * math.Sin(float64(i)))
	}
	return w
}

func TestRoundTrip(t *testing.T) {
	cfg := tiny()
	w := weights(t, cfg)
	for _, dt := range []safetensors.DType{safetensors.F32, safetensors.BF16, safetensors.F16} {
		t.Run(string(dt), func(t *testing.T) {
			dir := t.TempDir()
			if err := Write(dir, Model{Config: cfg, W: w}, dt); err != nil {
				t.Fatal(err)
			}
			m, err := Read(dir)
			if err != nil {
				t.Fatal(err)
			}
			got, back := m.Config, m.W
			if got != cfg {
				t.Fatalf("config %+v, want %+v", got, cfg)
			}
			for i, v := range w {
				want := v
				switch dt {
				case safetensors.BF16:
					want = tensor.ToBF16(v).Float32()
				case safetensors.F16:
					want = tensor.ToF16(v).Float32()
				}
				if math.Float32bits(back[i]) != math.Float32bits(want) {
					t.Fatalf("element %d: %v, want %v", i, back[i], want)
				}
			}
		})
	}
}

// TestLayout checks the file against Hugging Face's GPT-2 naming and
// Conv1D layout directly, element by element.
func TestLayout(t *testing.T) {
	cfg := tiny()
	w := weights(t, cfg)
	dir := written(t, cfg, w)
	f, err := safetensors.ReadFile(filepath.Join(dir, WeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	lay := cfg.Layout()
	if n, want := len(f.Names()), 2+12*cfg.Layers+2; n != want {
		t.Fatalf("%d tensors, want %d (no lm_head: it is tied)", n, want)
	}
	C := cfg.Hidden
	for name, shape := range map[string][]int{
		"transformer.wte.weight": {cfg.Vocab, C}, "transformer.wpe.weight": {cfg.SeqLen, C},
		"transformer.h.1.attn.c_attn.weight": {C, 3 * C}, "transformer.h.1.attn.c_attn.bias": {3 * C},
		"transformer.h.0.mlp.c_fc.weight": {C, 4 * C}, "transformer.h.0.mlp.c_proj.weight": {4 * C, C},
		"transformer.ln_f.bias": {C},
	} {
		info, err := f.Info(name)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(info.Shape, shape) {
			t.Errorf("%s: shape %v, want %v", name, info.Shape, shape)
		}
	}
	tr, _ := lay.Tensor("h.1.attn.c_attn.weight") // (3C, C): row o, column i
	hfv, _ := f.Float32("transformer.h.1.attn.c_attn.weight")
	for o := 0; o < 3*C; o++ {
		for i := 0; i < C; i++ {
			if hfv[i*3*C+o] != w[tr.Offset+o*C+i] {
				t.Fatalf("c_attn.weight[%d][%d] (HF, in×out) != Trellis [%d][%d] (out×in)", i, o, o, i)
			}
		}
	}
	var js map[string]any
	b, _ := os.ReadFile(filepath.Join(dir, ConfigFile))
	if err := json.Unmarshal(b, &js); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]any{"model_type": "gpt2", "n_embd": 48.0, "n_head": 3.0, "n_layer": 2.0,
		"n_positions": 16.0, "vocab_size": 67.0, "activation_function": "gelu_new", "tie_word_embeddings": true} {
		if js[k] != v {
			t.Errorf("config.json %s = %v, want %v", k, js[k], v)
		}
	}
}

// trellisLogits computes the (T, V) logits of tokens with Trellis's model,
// position by position (Logits returns the last position's).
func trellisLogits(t *testing.T, cfg model.Config, w []float32, tokens []int32) []float32 {
	t.Helper()
	dev := device.New(device.Config{})
	k, err := ops.New(ops.Config{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	fp, err := model.NewFlatParams(cfg, dev)
	if err != nil {
		t.Fatal(err)
	}
	copy(fp.W, w)
	gpt, err := model.New(model.Options{Model: cfg, Kernels: k, Device: dev, MicroBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	st, err := gpt.NewStash()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, len(tokens)*cfg.Vocab)
	for n := 1; n <= len(tokens); n++ {
		if err := gpt.Logits(fp, st, tokens[:n], out[(n-1)*cfg.Vocab:n*cfg.Vocab]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

var fixtureTokens = []int32{3, 66, 0, 17, 42, 5, 9, 60, 1, 33, 12, 50, 7, 28}

// TestMatchesPyTorch: the exported directory, loaded by the repository's
// PyTorch GPT-2 written from Hugging Face's naming (scripts/hf_gpt2.py),
// gives Trellis's logits within 1e-4. The fixture records the SHA-256 of
// the model.safetensors it was computed from, so a change in the export's
// bytes fails here until the fixture is regenerated with -torch.
func TestMatchesPyTorch(t *testing.T) {
	cfg := tiny()
	w := weights(t, cfg)
	dir := written(t, cfg, w)
	want, f := torchLogits(t, dir, "torch_logits.safetensors", "TestMatchesPyTorch", fixtureTokens, "../scripts/hf_gpt2.py")
	got := trellisLogits(t, cfg, w, fixtureTokens)
	if len(got) != len(want) {
		t.Fatalf("%d logits, fixture %d", len(got), len(want))
	}
	var worst float64
	for i := range want {
		worst = max(worst, math.Abs(float64(got[i]-want[i])))
	}
	if worst > 1e-4 {
		t.Fatalf("max |Trellis − PyTorch| = %.3g over the logits, want ≤ 1e-4", worst)
	}
	t.Logf("max |Trellis − PyTorch| = %.3g (PyTorch %s)", worst, f.Metadata()["torch"])
}

// torchLogits returns the logits of testdata/name, the fixture computed by
// the PyTorch script (its arguments before --model) from the exported
// directory dir over tokens, and the fixture. With -torch it is
// regenerated first; it fails when dir's model.safetensors is not the one
// the fixture records by SHA-256 (test names the test that regenerates it).
func torchLogits(t *testing.T, dir, name, test string, tokens []int32, script ...string) ([]float32, *safetensors.File) {
	t.Helper()
	fixture := filepath.Join("testdata", name)
	if *regen {
		toks := make([]string, len(tokens))
		for i, v := range tokens {
			toks[i] = strconv.Itoa(int(v))
		}
		args := append(append([]string(nil), script...), "--model", dir, "--tokens", strings.Join(toks, ","), "--out", fixture)
		if out, err := exec.Command("/usr/bin/python3", args...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	f, err := safetensors.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, WeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	if got, want := hex.EncodeToString(sum[:]), f.Metadata()["model_sha256"]; got != want {
		t.Fatalf("export's SHA-256 %s differs from the fixture's %s: regenerate with go test ./hf -run %s -torch", got, want, test)
	}
	logits, err := f.Float32("logits")
	if err != nil {
		t.Fatal(err)
	}
	return logits, f
}

// written is a temporary directory holding model cfg with weights w as
// Write writes it in F32.
func written(t *testing.T, cfg model.Config, w []float32) string {
	t.Helper()
	dir := t.TempDir()
	if err := Write(dir, Model{Config: cfg, W: w}, safetensors.F32); err != nil {
		t.Fatal(err)
	}
	return dir
}
