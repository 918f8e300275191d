package data

import "fmt"

// Position is where a run stands in the training data: plain data, so a
// checkpoint stores it as it is, and resuming from it reproduces the rest of
// the run's batches bit for bit.
type Position struct {
	Sample int64 `json:"sample" toml:"sample"` // training sequences consumed so far
}

// Advance returns the position after one optimizer step of globalBatch
// sequences.
func (p Position) Advance(globalBatch int) Position {
	return Position{Sample: p.Sample + int64(globalBatch)}
}

// Slice names the part of one optimizer step's global batch that one
// data-parallel rank processes in one gradient-accumulation micro-step.
//
// A step consumes samples [p, p+G) of the training order, G = GlobalBatch.
// With R = Ranks, B = MicroBatch and A = G/(R·B) micro-steps, rank r's
// micro-step k reads the B samples starting at
//
//	p + (r·A + k)·B
//
// so each rank owns a contiguous block of G/R samples and the union over
// ranks and micro-steps is the whole global batch, whatever R and A are.
// That is what makes a DP run equivalent to one device accumulating A·R
// micro-batches.
type Slice struct {
	GlobalBatch int // G, sequences per optimizer step over all ranks and micro-steps
	MicroBatch  int // B, sequences per rank per micro-step
	Rank        int // r, this rank's index in the data-parallel group
	Ranks       int // R, data-parallel group size
	Micro       int // k, the micro-step, in [0, A)
}

// Accum is A = G/(R·B), the micro-steps per optimizer step.
func (s Slice) Accum() int { return s.GlobalBatch / (s.Ranks * s.MicroBatch) }

// Validate names the field that breaks its rule.
func (s Slice) Validate() error {
	switch {
	case s.MicroBatch < 1:
		return fmt.Errorf("data: micro_batch=%d must be >= 1", s.MicroBatch)
	case s.Ranks < 1:
		return fmt.Errorf("data: dp=%d must be >= 1", s.Ranks)
	case s.GlobalBatch < 1 || s.GlobalBatch%(s.Ranks*s.MicroBatch) != 0:
		return fmt.Errorf("data: global_batch=%d must be a positive multiple of dp×micro_batch=%d×%d", s.GlobalBatch, s.Ranks, s.MicroBatch)
	case s.Rank < 0 || s.Rank >= s.Ranks:
		return fmt.Errorf("data: dp rank %d must be in [0, %d)", s.Rank, s.Ranks)
	case s.Micro < 0 || s.Micro >= s.Accum():
		return fmt.Errorf("data: micro-step %d must be in [0, %d)", s.Micro, s.Accum())
	}
	return nil
}

// First is the index of the slice's first sample in the training order for
// a step that starts at p.
func (s Slice) First(p Position) int64 {
	return p.Sample + int64((s.Rank*s.Accum()+s.Micro)*s.MicroBatch)
}

// Micro writes the (B, T) inputs and targets of slice s of the step that
// starts at position p.
func (l *Loader) Micro(p Position, s Slice, inputs, targets []int32) error {
	return l.MicroRanges(p, s, nil, inputs, targets)
}

// MicroRanges is Micro reading only the token ranges rs of each sample
// (BatchRanges: a context-parallel rank's share).
func (l *Loader) MicroRanges(p Position, s Slice, rs [][2]int, inputs, targets []int32) error {
	if err := s.Validate(); err != nil {
		return err
	}
	return l.BatchRanges(s.First(p), s.MicroBatch, rs, inputs, targets)
}
