package ops

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestVocabParallelIsCrossEntropy: the vocabulary-parallel cross-entropy
// over t shards (VocabRowMax, the group's maximum, VocabExpSum, the sums
// added, VocabNormalize) gives every row the loss and the probabilities
// CrossEntropyForward gives it over the whole row, on every kernel path,
// with shards whose valid columns end mid-vector and padding after them;
// the padding gets no probability.
func TestVocabParallelIsCrossEntropy(t *testing.T) {
	const N, Vfull, shards = 7, 75, 2 // shards of 38 and 37 valid columns, each padded to 40
	const Vl = 40
	rng := rand.New(rand.NewPCG(3, 4))
	logits := make([]float32, N*Vfull)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64() * 4)
	}
	targets := make([]int32, N)
	for i := range targets {
		targets[i] = int32(rng.IntN(Vfull))
	}
	for _, cfg := range kernelConfigs {
		k, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		probs, losses := make([]float32, N*Vfull), make([]float32, N)
		want := k.CrossEntropyForward(probs, losses, append([]float32(nil), logits...), targets, N, Vfull)

		part := make([][]float32, shards)
		mx, sum, tgt := make([]float32, N), make([]float32, N), make([]float32, N)
		lo := []int{0, 38}
		valid := []int{38, 37}
		for r := range shards {
			part[r] = make([]float32, N*Vl)
			for i := range part[r] {
				part[r][i] = 1e6 // padding: must not count
			}
			for n := range N {
				copy(part[r][n*Vl:], logits[n*Vfull+lo[r]:n*Vfull+lo[r]+valid[r]])
			}
			m := make([]float32, N)
			k.VocabRowMax(m, part[r], N, Vl, valid[r])
			for n := range N {
				if r == 0 || m[n] > mx[n] {
					mx[n] = m[n]
				}
			}
		}
		for r := range shards {
			s, g := make([]float32, N), make([]float32, N)
			k.VocabExpSum(s, g, part[r], mx, targets, lo[r], N, Vl, valid[r])
			for n := range N {
				sum[n] += s[n]
				tgt[n] += g[n]
			}
		}
		var got float64
		pl := make([]float32, N)
		for r := range shards {
			got = k.VocabNormalize(pl, part[r], sum, tgt, N, Vl, valid[r])
		}
		if math.Abs(got-float64(want)) > 1e-5*math.Abs(float64(want)) {
			t.Errorf("%+v: mean loss %g, want %g", cfg, got, want)
		}
		for n := range N {
			if d := math.Abs(float64(pl[n] - losses[n])); d > 1e-5*(1+math.Abs(float64(losses[n]))) {
				t.Errorf("%+v: row %d loss %g, want %g", cfg, n, pl[n], losses[n])
			}
			for r := range shards {
				for j := range Vl {
					p := part[r][n*Vl+j]
					if j >= valid[r] {
						if p != 0 {
							t.Fatalf("%+v: row %d shard %d padding column %d has probability %g", cfg, n, r, j, p)
						}
						continue
					}
					if w := probs[n*Vfull+lo[r]+j]; math.Abs(float64(p-w)) > 1e-6*(float64(w)+1e-6) {
						t.Fatalf("%+v: row %d column %d probability %g, want %g", cfg, n, lo[r]+j, p, w)
					}
				}
			}
		}
	}
}
