package train

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"trellis/hf"
	"trellis/safetensors"
)

// TestInitFromHuggingFace: a checkpoint exported as a Hugging Face model
// and named in [model] init starts a new run from those weights — under
// one device and under ZeRO-3 the same losses (every plan starts from the
// same model), below a random start's; a model of another shape is refused
// before anything runs, naming the field; and sampling the exported model
// gives the checkpoint's text.
func TestInitFromHuggingFace(t *testing.T) {
	j := tinyJob("dp=1")
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

	j.Model.Init = dir
	j.Train.Steps = 3
	one := runJob(t, j, "", "", 0)
	j.Parallel.Plan = "dp=2,zero=3"
	two := runJob(t, j, "", "", 0)
	for i := range one.losses {
		if d := math.Abs(one.losses[i]-two.losses[i]) / one.losses[i]; d > 1e-5 {
			t.Fatalf("step %d: dp=1 loss %v, dp=2,zero=3 %v", i+1, one.losses[i], two.losses[i])
		}
	}
	if one.losses[0] > first.losses[0]-0.5 {
		t.Fatalf("first loss from the exported weights %v, from random %v: the weights were not loaded", one.losses[0], first.losses[0])
	}

	bad := j
	bad.Model.Hidden, bad.Model.Heads = 48, 2
	if err := bad.Check(); err == nil || !strings.Contains(err.Error(), "hidden=32, the job's model.hidden=48") {
		t.Fatalf("another shape: %v", err)
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
}
