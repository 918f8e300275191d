package pp

import (
	"fmt"

	"trellis/model"
)

// WeightOrder is the sequence of units rank l.Rank's passes ask
// model.Params.Weights for in one step of schedule s (train), and in one
// evaluation pass (eval: Stage.Eval's chunks in order): what ZeRO-3's
// prefetch follows (parallel/zero's Config.Order). Per compute action
// (units as in arch.Layout: 0 the embedding and tied head, 1..L the
// blocks, L+1 the final norm):
//
//	F(c)  0 (first stage), the chunk's blocks ascending, L+1 and 0 (last stage: the norm, the tied head)
//	B(c)  0 and L+1 (last stage; 0 only for a tied head), the chunk's blocks descending (the embedding's backward needs no weights)
//	W(c)  the chunk's blocks descending with full recomputation (each reruns its forward), else nothing
//
// The order is the executor's whatever the timing: W's that run ahead
// fetch no weights (RunAhead is off when full recomputation gathers
// them), and a pipeline of one stage running 1F1B is the whole model's
// forward then backward per micro-batch (arch.Config.WeightOrder).
func WeightOrder(s *Schedule, l Layout, fullRecompute bool) (train, eval []int) {
	L, tied := l.Layers, l.Tied
	fwd := func(c int) []int {
		b, first, last := l.Chunk(c)
		var u []int
		if first {
			u = append(u, 0)
		}
		for blk := b[0]; blk < b[1]; blk++ {
			u = append(u, blk+1)
		}
		if last {
			u = append(u, L+1)
			if tied {
				u = append(u, 0)
			}
		}
		return u
	}
	blocksDown := func(c int) []int {
		b, _, _ := l.Chunk(c)
		var u []int
		for blk := b[1] - 1; blk >= b[0]; blk-- {
			u = append(u, blk+1)
		}
		return u
	}
	for _, a := range s.Ranks[l.Rank] {
		switch a.Op {
		case Forward:
			train = append(train, fwd(a.Chunk)...)
		case Backward:
			if _, _, last := l.Chunk(a.Chunk); last {
				if tied {
					train = append(train, 0)
				}
				train = append(train, L+1)
			}
			train = append(train, blocksDown(a.Chunk)...)
		case Weight:
			if fullRecompute {
				train = append(train, blocksDown(a.Chunk)...)
			}
		}
	}
	for c := 0; c < l.VPP; c++ {
		eval = append(eval, fwd(c)...)
	}
	return train, eval
}

// Sample lends fn a stash for the whole model (blocks and head) from the
// stage's free lists, for generating text between steps: only a pipeline
// of one stage holds the whole model.
func (s *Stage) Sample(fn func(st *model.Stash) error) error {
	if s.cfg.Layout.PP != 1 {
		return fmt.Errorf("pp: sampling needs the whole model, which pp=%d splits over stages", s.cfg.Layout.PP)
	}
	key := [2]int{-2, 0}
	st, err := s.stash(key)
	if err != nil {
		return err
	}
	defer func() {
		s.releaseHead(key, st)
		delete(s.live, key)
		s.free = append(s.free, st)
	}()
	return fn(st)
}
