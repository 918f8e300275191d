package train

import (
	"math"
	"sort"
)

// pick draws a token id in [0, vocab) from logits (len >= vocab): greedy when
// temperature is 0, else from softmax(logits/temperature) over the topK
// largest logits (all of them when topK is 0), by inverse transform with the
// uniform variate u in [0,1).
func pick(logits []float32, vocab int, temperature float64, topK int, u float32) int32 {
	l := logits[:vocab]
	if temperature <= 0 {
		best := 0
		for i, v := range l {
			if v > l[best] {
				best = i
			}
		}
		return int32(best)
	}
	idx := make([]int, vocab)
	for i := range idx {
		idx[i] = i
	}
	// Stable order: larger logit first, lower id on ties, so the draw is
	// reproducible.
	sort.SliceStable(idx, func(a, b int) bool { return l[idx[a]] > l[idx[b]] })
	if topK > 0 && topK < vocab {
		idx = idx[:topK]
	}
	mx := float64(l[idx[0]])
	p := make([]float64, len(idx))
	var z float64
	for i, id := range idx {
		p[i] = math.Exp((float64(l[id]) - mx) / temperature)
		z += p[i]
	}
	target := float64(u) * z
	var acc float64
	for i, id := range idx {
		acc += p[i]
		if target < acc {
			return int32(id)
		}
	}
	return int32(idx[len(idx)-1])
}
