package zero

// predictor names the unit whose weights are asked for next, following
// the model's declared call order (model.Config.WeightOrder): a training
// micro-batch asks for forward then backward; any other pass (evaluation,
// sampling) for forward alone. It keeps its place in that sequence: the
// unit asked for is looked up from the place after the last one (almost
// always exactly there), else from the start of the forward (a new pass).
// At the end of a pass the next pass's first unit is expected, except after
// the step's last backward (the update follows). A wrong guess costs only a wasted
// gather; it never changes results.
type predictor struct {
	fwd, seq  []int // the forward calls; forward then backward
	pos       int   // index in cur() of the unit asked for last (-1: none)
	train     bool  // a training micro-batch is under way (its backward follows)
	moreMicro bool  // the step has micro-batches after this one
}

// newPredictor follows the training order forward, backward.
func newPredictor(forward, backward []int) predictor {
	return predictor{fwd: forward, seq: append(append([]int(nil), forward...), backward...), pos: -1}
}

// cur is the sequence being followed.
func (p *predictor) cur() []int {
	if p.train {
		return p.seq
	}
	return p.fwd
}

// beginMicro: a training forward starts (whatever came before, such as an
// evaluation pass ending with the head).
func (p *predictor) beginMicro(k, accum int) {
	p.pos, p.train = -1, true
	p.moreMicro = k < accum-1
}

// reset forgets the place (after an update, which changes the weights).
func (p *predictor) reset() {
	p.pos, p.train, p.moreMicro = -1, false, false
}

// next records that unit u was asked for and returns the unit expected
// next, or -1.
func (p *predictor) next(u int) int {
	s := p.cur()
	i := index(s, u, p.pos+1)
	if i < 0 {
		if p.train && p.pos >= 0 {
			// Off the training sequence: a pass of its own follows.
			p.train, s = false, p.fwd
		}
		if i = index(s, u, 0); i < 0 {
			p.pos = -1
			return -1
		}
	}
	p.pos = i
	if i+1 < len(s) {
		return s[i+1]
	}
	// The end of a pass. After a forward alone another usually follows
	// (evaluation runs batch after batch), as does the next micro-batch
	// after a training backward with more in the step; after the step's
	// last backward the update comes.
	last := p.train && !p.moreMicro
	p.pos, p.train = -1, false
	if last {
		return -1
	}
	return p.fwd[0]
}

// index is the first i >= from with s[i] == u, or -1.
func index(s []int, u, from int) int {
	for i := max(from, 0); i < len(s); i++ {
		if s[i] == u {
			return i
		}
	}
	return -1
}
