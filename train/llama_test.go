package train

import (
	"fmt"
	"testing"

	"trellis/model"
)

// llamaJob trains a tiny Llama on the embedded novel under plan: widths
// that are not powers of two (hidden 48, SwiGLU 40, 12 tokens, a
// vocabulary of 259, padded under tp = 2), grouped-query attention (6
// query heads on 2 key/value heads: tp = 2 keeps one key/value head and
// its 3 query heads per rank), the untied head, dropout on.
func llamaJob(plan string, layers int) Job {
	j := tinyJob(plan)
	j.Model = model.Config{Arch: "llama", Layers: layers, Hidden: 48, Heads: 6, KVHeads: 2, FFN: 40, SeqLen: 12, Vocab: 259,
		Dropout: 0.1, RopeTheta: 500}
	return j
}

func TestLlamaSmoke(t *testing.T) {
	ref := runJob(t, llamaJob("dp=1", 3), t.TempDir(), "", 0)
	t.Logf("losses %v", ref.losses)
	got := runJob(t, llamaJob("pp=2,tp=2,dp=2,zero=1", 3), t.TempDir(), "", 0)
	compareRuns(t, got, ref)
	fmt.Println(got.losses)
}
