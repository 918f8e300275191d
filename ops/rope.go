package ops

import "math"

// Rotary position embedding (RoPE, Su et al. 2021) in Hugging Face's
// rotate_half convention: channel i of a head pairs with channel i+HS/2,
// and at position p the pair turns by the angle p·ω_i,
//
//	ω_i = θ^(−2i/HS)     i < HS/2
//	y_i      = x_i·cos(p·ω_i) − x_{i+HS/2}·sin(p·ω_i)
//	y_{i+HS/2} = x_{i+HS/2}·cos(p·ω_i) + x_i·sin(p·ω_i)
//
// (Hugging Face's LlamaForCausalLM stores q_proj and k_proj with their
// rows in this order — its conversion of Meta's checkpoints permutes the
// interleaved pairs (2i, 2i+1) into it — so its weights load unpermuted.)
// The rotation is orthogonal: its backward is the rotation by −p·ω_i.

// RoPETable fills cos and sin (T, HS/2) with cos(p·ω_i) and sin(p·ω_i) as
// Hugging Face's LlamaRotaryEmbedding computes them: ω_i = 1/θ^(2i/HS)
// rounded to fp32, the angle p·ω_i rounded to fp32, then its cosine and
// sine.
func RoPETable(cos, sin []float32, T, HS int, theta float64) {
	RoPETableRows(cos, sin, 0, T, HS, theta)
}

// RoPETableRows fills cos and sin (n, HS/2) with rows [first, first+n) of
// RoPETable's: the angles of positions first … first+n−1 (a context-parallel
// rank's chunks of a sequence), the same values row for row.
func RoPETableRows(cos, sin []float32, first, n, HS int, theta float64) {
	h := HS / 2
	_, _ = cos[n*h-1], sin[n*h-1]
	inv := make([]float32, h)
	for i := range inv {
		e := float32(2*i) / float32(HS)
		inv[i] = float32(1 / float64(float32(math.Pow(theta, float64(e)))))
	}
	for r := 0; r < n; r++ {
		p := first + r
		for i, w := range inv {
			a := float64(float32(p) * w)
			cos[r*h+i], sin[r*h+i] = float32(math.Cos(a)), float32(math.Sin(a))
		}
	}
}

// RoPEForward rotates, in place, the NH query and KV key heads of every
// row of qkv (B,T,(NH+2·KV)·HS), [q | k | v], at its position t (the
// value heads are left alone); cos and sin are RoPETable's (T, HS/2).
func RoPEForward(k *Kernels, qkv, cos, sin []float32, B, T, NH, KV, HS int) {
	rope(k, qkv, cos, sin, B, T, NH, KV, HS, false)
}

// RoPEBackward takes the gradient with respect to the rotated q and k
// heads of dqkv back through RoPEForward, in place (it rotates them by
// the opposite angles; the value heads' gradient is left alone).
func RoPEBackward(k *Kernels, dqkv, cos, sin []float32, B, T, NH, KV, HS int) {
	rope(k, dqkv, cos, sin, B, T, NH, KV, HS, true)
}

func rope(k *Kernels, x, cos, sin []float32, B, T, NH, KV, HS int, back bool) {
	if B == 0 || T == 0 {
		return
	}
	ld, h, heads := (NH+2*KV)*HS, HS/2, NH+KV
	_, _, _ = x[B*T*ld-1], cos[T*h-1], sin[T*h-1]
	k.Parallel(B*T, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			t := r % T
			c, s := cos[t*h:t*h+h], sin[t*h:t*h+h]
			row := x[r*ld : r*ld+heads*HS]
			for hd := 0; hd < heads; hd++ {
				rotatePairs(row[hd*HS:hd*HS+h], row[hd*HS+h:hd*HS+HS], c, s, back)
			}
		}
	})
}

// rotatePairs turns the pairs (a_i, b_i) by the angles of c, s (backward:
// by their opposites).
func rotatePairs(a, b, c, s []float32, back bool) {
	b, c, s = b[:len(a)], c[:len(a)], s[:len(a)]
	if back {
		for i, x := range a {
			y := b[i]
			a[i] = x*c[i] + y*s[i]
			b[i] = y*c[i] - x*s[i]
		}
		return
	}
	for i, x := range a {
		y := b[i]
		a[i] = x*c[i] - y*s[i]
		b[i] = y*c[i] + x*s[i]
	}
}
