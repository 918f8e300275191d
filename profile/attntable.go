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
// GPT-2 small's 64 and Llama's 128 with 32 below them.
func attnTableSeq() []int  { return []int{64, 128, 256, 512, 1024} }
func attnTableHead() []int { return []int{32, 64, 128} }

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
			scores := float64(attnHeads) * float64(T) * float64(T+1) / 2
			for kind := range s.Cost {
				s.Cost[kind][i][j] = sec[kind] / scores
			}
		}
	}
	return s, nil
}

// timeAttnCores times the four passes at one shape: flash forward and
// backward, materialising forward and backward.
func timeAttnCores(ctx context.Context, k *ops.Kernels, T, d int, budget time.Duration) ([plan.AttnKinds]float64, error) {
	var sec [plan.AttnKinds]float64
	r := rand.New(rand.NewPCG(5, 6))
	const B, NH = 1, attnHeads
	C := NH * d
	qkv, out, dout := randSlice(r, B*T*3*C), make([]float32, B*T*C), randSlice(r, B*T*C)
	lse, dqkv := make([]float32, B*NH*T), make([]float32, B*T*3*C)
	att, scratch := make([]float32, B*NH*T*T), make([]float32, ops.AttentionScratchSize(k, B, T, NH))
	passes := [plan.AttnKinds]func(){
		func() { ops.FlashAttentionForward(k, out, lse, qkv, B, T, C, NH, NH) },
		func() { ops.FlashAttentionBackward(k, dqkv, dout, qkv, out, lse, B, T, C, NH, NH) },
		func() { ops.AttentionForward(k, out, att, qkv, B, T, C, NH, NH) },
		func() { ops.AttentionBackward(k, dqkv, scratch, dout, qkv, att, B, T, C, NH, NH) },
	}
	for kind, f := range passes {
		if kind == 1 || kind == 3 { // the backward reads its forward's output
			passes[kind-1]()
		}
		var err error
		if sec[kind], err = timeIt(ctx, budget, f); err != nil {
			return sec, err
		}
	}
	return sec, nil
}
