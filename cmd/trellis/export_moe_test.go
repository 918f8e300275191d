package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"trellis/hf"
)

// trellis export writes an MoE checkpoint as a Qwen2MoeForCausalLM
// directory that reads back as the checkpoint's model; one trained with a
// capacity factor is refused, naming the key and --dropless, until
// --dropless writes it as the dropless model; --dropless on a dense model
// is refused; a model with shared experts is refused naming the key.
func TestExportMoE(t *testing.T) {
	dir := t.TempDir()
	moe := []string{"model.arch=llama", "model.experts=3", "model.top_k=2", "model.expert_ffn_hidden=24", "model.ffn_hidden=40",
		"model.dense_first=1", "model.layers=3", "checkpoint.dir=ck", "train.steps=2"}
	if r := run(t, dir, tiny(append(moe, "model.capacity_factor=1.25")...)...); r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.stderr)
	}
	checkOneLineError(t, run(t, dir, "export", "--checkpoint", "ck", "--out", "m"), []string{"model.capacity_factor=1.25", "--dropless"})
	if _, err := os.Stat(filepath.Join(dir, "m", hf.WeightsFile)); err == nil {
		t.Error("the refused export wrote a model")
	}
	r := run(t, dir, "export", "--checkpoint", "ck", "--out", "m", "--dropless")
	if r.err != nil {
		t.Fatalf("export --dropless: %v\n%s", r.err, r.stderr)
	}
	m, err := hf.Read(filepath.Join(dir, "m"))
	if err != nil {
		t.Fatal(err)
	}
	if c := m.Config; c.Experts != 3 || c.TopK != 2 || c.ExpertFFN != 24 || c.DenseFirst != 1 || c.CapacityFactor != 0 || c.Layers != 3 {
		t.Errorf("the export reads back as %v", c)
	}
	js, _ := os.ReadFile(filepath.Join(dir, "m", hf.ConfigFile))
	if !strings.Contains(string(js), `"Qwen2MoeForCausalLM"`) {
		t.Errorf("config.json: %s", js)
	}

	if r := run(t, dir, tiny("checkpoint.dir=dense", "train.steps=1")...); r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.stderr)
	}
	checkOneLineError(t, run(t, dir, "export", "--checkpoint", "dense", "--out", "d", "--dropless"), []string{"--dropless", "model.experts=0"})

	if r := run(t, dir, tiny(append(moe[:len(moe)-2], "checkpoint.dir=shared", "train.steps=1", "model.shared_experts=1")...)...); r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.stderr)
	}
	checkOneLineError(t, run(t, dir, "export", "--checkpoint", "shared", "--out", "s"), []string{"model.shared_experts=1", "Qwen2MoeForCausalLM gates its shared expert"})
}
