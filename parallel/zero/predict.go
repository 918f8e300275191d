package zero

// predictor guesses which unit's weights are asked for next, from the unit
// just asked for and the one before, knowing the model's call order
// (model.Params) for L blocks, units 0 (embedding and tied head), 1..L
// (blocks) and L+1 (final LayerNorm):
//
//	forward   0, 1, …, L, L+1, 0(head)
//	backward  0(head), L+1, L, …, 1        (the embedding needs no weights)
//
// A forward pass after BeginMicro is followed by a backward pass; an
// evaluation or sampling forward is not. Activation recomputation
// (model.Recompute) keeps this order: block l's recomputed forward runs
// inside its backward's Weights(l+1) hold, so the gather that serves the
// backward serves the recomputation too. A wrong guess costs only a
// wasted gather; it never changes results.
type predictor struct {
	units     int  // L+2
	prev      int  // the unit asked for before the current one (-1: none)
	expectBwd bool // a training forward is under way: its backward follows
	moreMicro bool // the step has micro-batches after this one
}

// beginMicro: a training forward starts (whatever came before, such as an
// evaluation pass ending with the head).
func (p *predictor) beginMicro(k, accum int) {
	p.prev, p.expectBwd = -1, true
	p.moreMicro = k < accum-1
}

// reset forgets the history (after an update, which changes the weights).
func (p *predictor) reset() {
	p.prev, p.expectBwd, p.moreMicro = -1, false, false
}

// next records that unit cur was asked for and returns the unit expected
// next, or -1.
func (p *predictor) next(cur int) int {
	prev, L := p.prev, p.units-2
	p.prev = cur
	switch {
	case cur == 0 && prev == L+1: // the head's forward: then its backward, or the next forward
		return 0
	case cur == 0 && prev == 0 && p.expectBwd: // the head's backward
		p.expectBwd = false
		return L + 1
	case cur == 0: // a forward pass starts
		return 1
	case cur == L+1 && prev == L:
		return 0
	case cur == L+1 && prev == 0:
		return L
	case prev == cur-1: // a block, forward
		return cur + 1
	case prev == cur+1 && cur > 1: // a block, backward
		return cur - 1
	case prev == cur+1 && p.moreMicro: // block 0's backward, then the next micro-batch
		return 0
	}
	return -1
}
