package pp

import (
	"fmt"

	"trellis/model"
)

// Eval runs one micro-batch forward through the pipeline without dropout
// and returns its loss on the rank that runs the last model stage (0
// elsewhere). Every pipeline rank calls it with the same batch: each chunk
// in stage order receives its input, runs and sends its output.
func (s *Stage) Eval(b model.Batch) (float64, error) {
	b.Eval = true
	var loss float64
	l := s.cfg.Layout
	for c := 0; c < l.VPP; c++ {
		key := [2]int{-1, c}
		st, err := s.stash(key)
		if err != nil {
			return 0, err
		}
		x, err := s.evalChunk(c, st, b)
		s.releaseHead(key, st)
		delete(s.live, key)
		s.free = append(s.free, st)
		if err != nil {
			return 0, fmt.Errorf("pp: rank %d, evaluation of chunk %d: %w", l.Rank, c, err)
		}
		loss += x
	}
	return loss, nil
}

func (s *Stage) evalChunk(c int, st *model.Stash, b model.Batch) (float64, error) {
	l := s.cfg.Layout
	bounds, first, last := l.Chunk(c)
	next, prev := (l.Rank+1)%l.PP, (l.Rank-1+l.PP)%l.PP
	if err := s.cfg.GPT.Load(st, b); err != nil {
		return 0, err
	}
	if !first {
		if err := s.cfg.Link.Recv(st.Residual(bounds[0]), prev, false).Wait(); err != nil {
			return 0, err
		}
	}
	loss, err := s.runForward(c, st)
	if err != nil || last {
		return loss, err
	}
	return 0, s.cfg.Link.Send(st.Residual(bounds[1]), next, false).Wait()
}
