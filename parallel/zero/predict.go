package zero

// predictor names the unit whose weights are asked for next, following
// the rank's declared call order (Config.Order, which the pipeline
// schedule and arch.Config.WeightOrder give): a training step asks for its
// micro-batches' forward and backward calls one after another; any other
// pass (evaluation, sampling) for the evaluation order alone. It keeps
// its place in that sequence: the unit asked for is looked up from the
// place after the last one (almost always exactly there), else from the
// start of the evaluation order (a pass of its own). At the end of an
// evaluation pass the next one's first unit is expected, at the end of a
// step nothing (the update follows). A wrong guess costs only a wasted
// gather; it never changes results.
type predictor struct {
	eval, step []int
	pos        int  // index in cur() of the unit asked for last (-1: none)
	train      bool // a training step is under way
}

func newPredictor(o Order) predictor {
	return predictor{eval: o.Eval, step: o.Train, pos: -1}
}

// cur is the sequence being followed.
func (p *predictor) cur() []int {
	if p.train {
		return p.step
	}
	return p.eval
}

// beginStep: a training step starts.
func (p *predictor) beginStep() { p.pos, p.train = -1, true }

// reset forgets the place (after an update, which changes the weights).
func (p *predictor) reset() { p.pos, p.train = -1, false }

// next records that unit u was asked for and returns the unit expected
// next, or -1.
func (p *predictor) next(u int) int {
	s := p.cur()
	i := index(s, u, p.pos+1)
	if i < 0 {
		if p.train && p.pos >= 0 {
			// Off the training sequence: a pass of its own follows.
			p.train, s = false, p.eval
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
	last := p.train
	p.pos, p.train = -1, false
	if last || len(p.eval) == 0 {
		return -1
	}
	return p.eval[0]
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
