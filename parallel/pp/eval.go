package pp

import (
	"fmt"

	"trellis/model"
)

// Eval runs one micro-batch forward through the pipeline without dropout
// and returns its loss on the rank that runs the last model stage (0
// elsewhere). Every pipeline rank calls it with the same batch: each chunk
// in stage order receives its input (from the chunk before it when that
// runs here: DualPipeV's turn), runs and sends its output.
func (s *Stage) Eval(b model.Batch) (float64, error) {
	b.Eval = true
	var loss float64
	l := s.cfg.Layout
	var carry *model.Stash // the previous chunk's stash, while the next chunk needs its output
	defer func() {
		if carry != nil {
			s.evalFree(-1, carry)
		}
	}()
	for c := 0; c < l.VPP; c++ {
		st, err := s.stash([2]int{-1, c})
		if err != nil {
			return 0, err
		}
		x, err := s.evalChunk(c, st, carry, b)
		if carry != nil {
			s.evalFree(c-1, carry)
			carry = nil
		}
		if _, next := l.Placement().Neighbours(l.Rank, c); next.Local(l.Rank) && err == nil {
			carry = st
		} else {
			s.evalFree(c, st)
		}
		if err != nil {
			return 0, fmt.Errorf("pp: rank %d, evaluation of chunk %d: %w", l.Rank, c, err)
		}
		loss += x
	}
	return loss, nil
}

// evalFree returns the evaluation stash of chunk c.
func (s *Stage) evalFree(c int, st *model.Stash) {
	key := [2]int{-1, c}
	s.releaseHead(key, st)
	delete(s.live, key)
	s.free = append(s.free, st)
}

func (s *Stage) evalChunk(c int, st, carry *model.Stash, b model.Batch) (float64, error) {
	l := s.cfg.Layout
	bounds, _, last := l.Chunk(c)
	prev, next := l.Placement().Neighbours(l.Rank, c)
	if err := s.cfg.GPT.Load(st, b); err != nil {
		return 0, err
	}
	switch {
	case prev.Local(l.Rank):
		copy(st.Residual(bounds[0]), carry.Residual(bounds[0]))
	case prev.Remote(l.Rank):
		if err := s.cfg.Link.Recv(st.Residual(bounds[0]), prev.Rank, false).Wait(); err != nil {
			return 0, err
		}
	}
	loss, err := s.runForward(s.cfg.GPT, c, st)
	if err != nil || last || !next.Remote(l.Rank) {
		return loss, err
	}
	return 0, s.cfg.Link.Send(st.Residual(bounds[1]), next.Rank, false).Wait()
}
