package arch

// WeightOrder is the sequence of units a training micro-batch asks
// Params.Weights for, as Forward and Backward make the calls, for L
// blocks (units as in Layout: 0 the embedding and tied head, 1..L the
// blocks, L+1 the final LayerNorm):
//
//	forward   0, 1, …, L, L+1, 0 (the head)
//	backward  0 (the head), L+1, L, …, 1      (the embedding's backward needs no weights)
//
// An evaluation, sampling or inference pass makes the forward calls alone.
// The order is the same for every Part, precision, attention kernel and
// recomputation mode: a recomputed block forward runs inside its backward's
// Weights hold. It is data for whoever fetches weights ahead of use
// (ZeRO-3's prefetch), and TestWeightOrder holds it to the calls the
// model really makes.
//
// An untied head (a Llama's lm_head lives in unit L+1 with the final norm)
// asks for no unit 0 at the head: forward 0, 1, …, L+1; backward L+1, L, …, 1.
func (c Config) WeightOrder() (forward, backward []int) {
	L := c.Layers
	forward = make([]int, 0, L+3)
	for u := 0; u <= L+1; u++ {
		forward = append(forward, u)
	}
	backward = make([]int, 0, L+2)
	if c.Tied() {
		forward = append(forward, 0)
		backward = append(backward, 0)
	}
	backward = append(backward, L+1)
	for u := L; u >= 1; u-- {
		backward = append(backward, u)
	}
	return forward, backward
}
