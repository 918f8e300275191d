package train

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"trellis/hf"
	"trellis/safetensors"
)

// TestMoEHuggingFaceInterop: an MoE checkpoint of an expert-parallel plan
// (blocks 1 and 3 of four with experts: dense_first 1, moe_every 2) is
// exported as a Qwen2MoeForCausalLM directory that reads back as the same
// weights and model; named in [model] init it starts a run from them on
// one device and under a pipeline with the same losses (below a random
// start's); another expert shape or MoE-layer pattern is refused by name;
// trellis sample gives the same text from the checkpoint and its export;
// scripts/py_qwen2moe.py (where /usr/bin/python3 is) gives Trellis's
// logits; with a capacity factor the export is refused, naming the key.
func TestMoEHuggingFaceInterop(t *testing.T) {
	j := moeJob("dp=2,ep=2", 4, 0)
	j.Model.DenseFirst, j.Model.MoEEvery = 1, 2
	j.Train.Steps = 6
	ck := t.TempDir()
	first := runJob(t, j, ck, "", 0)
	ws, err := LoadWeights(ck, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "hf")
	if err := hf.Write(dir, hf.Model{Config: ws.Model, W: ws.W, Meta: map[string]string{hf.MetaTokenizer: ws.Tokenizer}}, safetensors.F32); err != nil {
		t.Fatal(err)
	}
	back, err := hf.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := sameBits(back.W, ws.W); err != nil || sameShape(j.Model, back.Config, "export") != nil {
		t.Fatalf("the export reads back differently: %v (%v)", err, back.Config)
	}

	j.Model.Init, j.Train.Steps = dir, 3
	j.Parallel.Plan = "dp=1"
	one := runJob(t, j, "", "", 0)
	j.Parallel.Plan = "pp=2"
	split := runJob(t, j, "", "", 0)
	for i := range one.losses {
		if d := math.Abs(one.losses[i]-split.losses[i]) / one.losses[i]; d > 1e-5 {
			t.Fatalf("step %d: dp=1 loss %v, pp=2 %v", i+1, one.losses[i], split.losses[i])
		}
	}
	if one.losses[0] > first.losses[0]-0.3 {
		t.Fatalf("first loss from the exported weights %v, from random %v: the weights were not loaded", one.losses[0], first.losses[0])
	}
	for _, c := range []struct {
		edit func(*Job)
		want string
	}{
		{func(b *Job) { b.Model.TopK = 1 }, "top_k=2, the job's model.top_k=1"},
		{func(b *Job) { b.Model.ExpertFFN = 16 }, "expert_ffn_hidden=24, the job's model.expert_ffn_hidden=16"},
		{func(b *Job) { b.Model.MoEEvery = 1 }, "layer 2 is dense, the job's is an MoE layer (model.dense_first=1, model.moe_every=1)"},
	} {
		bad := j
		c.edit(&bad)
		if err := bad.Check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("another shape: %v, want %q", err, c.want)
		}
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

	// scripts/py_qwen2moe.py (plain Python) runs the export: Trellis's
	// logits within 1e-5 (the smallest routing margin, measured 1.8e-5,
	// is far above fp32's error in the probabilities, about 1e-7).
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		f := scriptLogits(t, back, dir, "../scripts/py_qwen2moe.py")
		m, err := strconv.ParseFloat(f.Metadata()["min_margin"], 64)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("smallest routing margin %.3g", m)
	}

	capped := ws.Model
	capped.CapacityFactor = 1.5
	err = hf.Write(t.TempDir(), hf.Model{Config: capped, W: ws.W}, safetensors.F32)
	if err == nil || !strings.Contains(err.Error(), "model.capacity_factor=1.5: Qwen2MoeForCausalLM is dropless") {
		t.Fatalf("export with a capacity factor: %v", err)
	}
}
