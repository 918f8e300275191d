package train

import (
	"os"
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
	ws, back, dir, j := hfExport(t, j, "pp=2")
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
	err := hf.Write(t.TempDir(), hf.Model{Config: capped, W: ws.W}, safetensors.F32)
	if err == nil || !strings.Contains(err.Error(), "model.capacity_factor=1.5: Qwen2MoeForCausalLM is dropless") {
		t.Fatalf("export with a capacity factor: %v", err)
	}
}
