package profile

import (
	"context"
	"math/rand/v2"
	"time"

	"trellis/ops"
	"trellis/plan"
)

// attnTableSeq and attnTableHead are the grid the profile times: the
// lengths a CPU run trains at, in octaves (the cost per score is not
// linear in 1/T between 128 and 1,024 for the materialising backward,
// whose (T, T) probabilities leave the caches), and the head sizes of
// GPT-2 small's 64 and Llama's 128 with 32 below them, and 16, the
// narrow heads of the small models a CPU host trains (the kernels'
// blocked path, priced at that size only: plan.AttnTable.Covers).
func attnTableSeq() []int  { return []int{64, 128, 256, 512, 1024} }
func attnTableHead() []int { return []int{16, 32, 64, 128} }

// attnHeads is the heads of the timed shapes (B = 1).
const attnHeads = 4

// measureAttnTable times the engine's two attention cores
// (ops.FlashAttentionForward/Backward and ops.AttentionForward/Backward)
// at every (T, d) of the grid, attnHeads heads of one sequence, as
// plan.AttnTable's seconds per causal score of one head.
func measureAttnTable(ctx context.Context, c Config, k *ops.Kernels) (plan.AttnTable, error) {
	s := plan.AttnTable{Seq: attnTableSeq(), Head: attnTableHead()}
	budget := 80 * time.Millisecond
	if c.Quick {
		budget = 20 * time.Millisecond
	}
	for kind := range s.Cost {
		s.Cost[kind] = make([][]float64, len(s.Seq))
		for i := range s.Seq {
			s.Cost[kind][i] = make([]float64, len(s.Head))
		}
	}
	for i, T := range s.Seq {
		for j, d := range s.Head {
			sec, err := timeAttnCores(ctx, k, T, d, budget)
			if err != nil {
				return s, err
			}
			for kind := range s.Cost {
				s.Cost[kind][i][j] = sec[kind] / causalScores(T)
			}
		}
	}
	return s, nil
}

// causalScores is the causal scores of the timed shapes: attnHeads
// heads of T·(T+1)/2.
func causalScores(T int) float64 { return float64(attnHeads) * float64(T) * float64(T+1) / 2 }

// timeAttnCores times the four passes at one shape: flash forward and
// backward (timeAttention), materialising forward and backward.
func timeAttnCores(ctx context.Context, k *ops.Kernels, T, d int, budget time.Duration) ([plan.AttnKinds]float64, error) {
	var sec [plan.AttnKinds]float64
	const B, NH = 1, attnHeads
	C := NH * d
	f, err := timeAttention(ctx, k, AttnSample{B: B, T: T, C: C, NH: NH}, budget, 1)
	if err != nil {
		return sec, err
	}
	sec[plan.AttnFlashFwd], sec[plan.AttnFlashBwd] = f.Fwd, f.Bwd
	r := rand.New(rand.NewPCG(5, 6))
	qkv, out, dout := randSlice(r, B*T*3*C), make([]float32, B*T*C), randSlice(r, B*T*C)
	dqkv := make([]float32, B*T*3*C)
	att, scratch := make([]float32, B*NH*T*T), make([]float32, ops.AttentionScratchSize(k, B, T, NH))
	fwd := func() { ops.AttentionForward(k, out, att, qkv, B, T, C, NH, NH) }
	if sec[plan.AttnDenseFwd], err = timeIt(ctx, budget, fwd); err != nil {
		return sec, err
	}
	fwd() // the backward reads the forward's probabilities
	sec[plan.AttnDenseBwd], err = timeIt(ctx, budget, func() { ops.AttentionBackward(k, dqkv, scratch, dout, qkv, att, B, T, C, NH, NH) })
	return sec, err
}
