package model

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"trellis/tensor"
)

// tinyLlama is the Llama of the whole-model tests: grouped-query attention
// (6 query heads of 2 channels on 2 key/value heads, 3:1), a SwiGLU of
// width 20, the untied head; tinyLlamaTied is multi-head with the head
// tied to the embedding.
var (
	tinyLlama     = Config{Arch: "llama", Layers: 2, Hidden: 12, Heads: 6, KVHeads: 2, FFN: 20, SeqLen: 5, Vocab: 11, RopeTheta: 100}
	tinyLlamaTied = Config{Arch: "llama", Layers: 2, Hidden: 8, Heads: 2, FFN: 12, SeqLen: 5, Vocab: 11, TieEmbeddings: true, NormEps: 1e-6}
)

// TestWholeModelGradient checks every parameter gradient of a tiny model
// against central differences of the loss (float32 forward, float64
// difference), with and without dropout, for GPT-2 and for Llama (GQA
// with the untied head, MHA with the tied one; flash on and off). The
// measure, per tensor, is max |analytic − numeric| / max |numeric|.
func TestWholeModelGradient(t *testing.T) {
	for _, c := range []struct {
		name  string
		cfg   Config
		flash bool
	}{{"gpt2", tiny, false}, {"llama", tinyLlama, false}, {"llama flash", tinyLlama, true}, {"llama tied", tinyLlamaTied, false}} {
		for _, dropout := range []float64{0, 0.2} {
			t.Run(fmt.Sprintf("%s/dropout=%v", c.name, dropout), func(t *testing.T) {
				cfg := c.cfg
				cfg.Dropout = dropout
				wholeModelGradient(t, cfg, c.flash)
			})
		}
	}
}

func wholeModelGradient(t *testing.T, cfg Config, flash bool) {
	const B = 2
	m, p, s, _ := setupOn(t, cfg, B, 2, Options{Flash: flash})
	perturb(p.W, 0.3, 5)
	setTestBias(t, m)
	batch := randomBatch(cfg, B, 3)
	batch.Step = 4
	const dloss = 0.5
	if _, err := m.Forward(p, s, batch); err != nil {
		t.Fatal(err)
	}
	p.ZeroGrads()
	if err := m.Backward(p, s, dloss); err != nil {
		t.Fatal(err)
	}
	loss := func() float64 {
		m.TakeExpertStats()
		_, err := m.Forward(p, s, batch)
		if err != nil {
			t.Fatal(err)
		}
		var sum float64 // the per-token losses summed in float64
		for _, v := range s.Losses() {
			sum += float64(v)
		}
		return dloss * (sum/float64(len(s.Losses())) + m.TakeExpertStats().Aux) // an MoE model's aux losses too
	}
	// An MoE layer's routing is piecewise constant in the weights: a
	// difference whose two points route differently from the weights
	// themselves straddles a jump, and is taken again on a smaller step.
	const start = float32(3e-3)
	loss()
	base := routingKey(m, s)
	var worst float64
	skipped := 0
	for _, u := range m.Layout().Units {
		for _, tn := range u.Tensors {
			var maxDiff, maxNum, small, res float64
			for i := tn.Offset; i < tn.Offset+tn.Size; i++ {
				x0 := p.W[i]
				var lp, lm float64
				eps := start
				for try := 0; ; try++ {
					p.W[i] = x0 + eps
					lp = loss()
					same := slices.Equal(routingKey(m, s), base)
					p.W[i] = x0 - eps
					lm = loss()
					same = same && slices.Equal(routingKey(m, s), base)
					p.W[i] = x0
					if same || try == 4 {
						break
					}
					eps /= 4
				}
				if eps < start/200 {
					skipped++
					continue
				}
				num := (lp - lm) / (float64(x0+eps) - float64(x0-eps))
				maxNum = max(maxNum, math.Abs(num))
				// the difference's resolution: 2 ulps of fp32 on each loss
				res = max(res, 0x1p-23*(math.Abs(lp)+math.Abs(lm))/(float64(x0+eps)-float64(x0-eps)))
				if eps < start { // a smaller step: fp32's rounding of the loss weighs more
					small = max(small, math.Abs(num-float64(p.G[i])))
					continue
				}
				maxDiff = max(maxDiff, math.Abs(num-float64(p.G[i])))
			}
			if small > 1e-2*maxNum {
				t.Errorf("%s: relative error %.3g on a reduced step", tn.Name, small/maxNum)
			}
			e := maxDiff / maxNum
			worst = max(worst, e)
			// relative to the tensor's largest gradient, beyond the
			// difference's own resolution (a router's gradients are small)
			if maxNum == 0 || maxDiff > 2e-3*maxNum+res {
				t.Errorf("%s: relative error %.3g (max |numeric| %.3g)", tn.Name, e, maxNum)
			}
		}
	}
	if skipped > m.Layout().Size/100 {
		t.Errorf("%d of %d weights straddle a routing change on every step", skipped, m.Layout().Size)
	}
	t.Logf("worst relative error %.3g (%d weights skipped at routing jumps)", worst, skipped)
}

// routingKey is every MoE layer's routing of the stash's pass (nil for a
// dense model): each assignment's expert and row.
func routingKey(m *GPT, s *Stash) []int32 {
	var key []int32
	for l := range m.cfg.Layers {
		if !m.cfg.MoELayer(l) {
			continue
		}
		r, err := m.d.moe.routeOf(m, s.blocks[l].moe, s.b*s.t, l)
		if err != nil {
			panic(err) // no comm without cp
		}
		key = append(append(key, r.experts...), r.rows...)
	}
	return key
}

// recorder is a Params that logs the calls the model makes.
type recorder struct {
	*FlatParams
	log  []string
	held map[int]int
}

func (r *recorder) Weights(u int) (tensor.Buf, error) {
	r.held[u]++
	r.log = append(r.log, fmt.Sprintf("W%d", u))
	return r.FlatParams.Weights(u)
}
func (r *recorder) ReleaseWeights(u int) { r.held[u]-- }
func (r *recorder) Grads(u int) ([]float32, error) {
	return r.FlatParams.Grads(u)
}
func (r *recorder) GradsDone(u int) error {
	r.log = append(r.log, fmt.Sprintf("D%d", u))
	return nil
}

func TestParamsProtocol(t *testing.T) {
	cfg := Config{Layers: 3, Hidden: 8, Heads: 2, SeqLen: 4, Vocab: 7}
	m, p, s, _ := setup(t, cfg, 1, 1)
	r := &recorder{FlatParams: p, held: map[int]int{}}
	if _, err := m.Forward(r, s, randomBatch(cfg, 1, 1)); err != nil {
		t.Fatal(err)
	}
	if err := m.Backward(r, s, 1); err != nil {
		t.Fatal(err)
	}
	// Forward: embedding, blocks, final LN, head. Backward: head, final LN
	// (done), blocks L..1 (each done), embedding (done last).
	want := "W0 W1 W2 W3 W4 W0 W0 W4 D4 W3 D3 W2 D2 W1 D1 D0"
	if got := strings.Join(r.log, " "); got != want {
		t.Errorf("call order\n got %s\nwant %s", got, want)
	}
	for u, n := range r.held {
		if n != 0 {
			t.Errorf("unit %d: %d more Weights than ReleaseWeights", u, n)
		}
	}
}
