package pp

import (
	"fmt"

	"trellis/model"
	"trellis/plan"
)

// Placement is where a pipeline's pp·vpp model stages live. Megatron's
// (V false): rank r's chunk c is stage c·pp + r. DualPipeV's V (vpp = 2):
// rank r's chunk 0 is stage r and its chunk 1 stage 2pp−1−r, so the
// forward runs down the ranks on chunk 0 and back up on chunk 1, stages
// pp−1 and pp meet on rank pp−1 and the first and last stage on rank 0.
type Placement struct {
	PP, VPP int
	V       bool
}

// Stages is pp·vpp.
func (p Placement) Stages() int { return p.PP * max(p.VPP, 1) }

// Stage is the model stage of rank r's chunk c.
func (p Placement) Stage(r, c int) int {
	if p.V {
		if c == 0 {
			return r
		}
		return 2*p.PP - 1 - r
	}
	return c*p.PP + r
}

// Place is the rank and chunk holding model stage s.
func (p Placement) Place(s int) Hop {
	if p.V {
		if s < p.PP {
			return Hop{Rank: s, Chunk: 0}
		}
		return Hop{Rank: 2*p.PP - 1 - s, Chunk: 1}
	}
	return Hop{Rank: s % p.PP, Chunk: s / p.PP}
}

// Hop is a neighbouring model stage's rank and chunk; Rank is −1 where
// there is none (before the first stage, after the last).
type Hop struct{ Rank, Chunk int }

// Remote says whether the stage exists on another rank than r: a message.
func (h Hop) Remote(r int) bool { return h.Rank >= 0 && h.Rank != r }

// Local says whether the stage is on rank r too: passed without a message.
func (h Hop) Local(r int) bool { return h.Rank == r }

// Neighbours are the stages before and after rank r's chunk c.
func (p Placement) Neighbours(r, c int) (prev, next Hop) {
	s := p.Stage(r, c)
	prev, next = Hop{Rank: -1, Chunk: -1}, Hop{Rank: -1, Chunk: -1}
	if s > 0 {
		prev = p.Place(s - 1)
	}
	if s < p.Stages()-1 {
		next = p.Place(s + 1)
	}
	return prev, next
}

// Layout is where the model lives on one pipeline rank: the blocks of each
// of its chunks, split over the pp·vpp model stages by the planner's rule
// (plan.ChunkLayers: the lighter stages at the ends), and the parameter
// units it holds. Stage 0 also holds the embedding (unit 0); stage
// pp·vpp−1 the final norm (unit L+1, with an untied LM head) and, for the
// tied LM head, unit 0 again: the two copies stay equal because their
// gradients are summed before each update — unless, as in DualPipeV's V,
// both stages are on one rank, which holds unit 0 once.
type Layout struct {
	PP, VPP, Rank int
	V             bool     // DualPipeV's V placement (Placement)
	Layers        int      // L
	Tied          bool     // the LM head is unit 0's embedding (the last stage holds unit 0 too)
	Bounds        [][2]int // (pp·vpp) per model stage: blocks [lo, hi)
	Units         []int    // the global units this rank holds, ascending
}

// NewLayout splits cfg's layers for rank of a pp×vpp pipeline (Megatron's
// placement).
func NewLayout(cfg model.Config, pp, vpp, rank int) (Layout, error) {
	return NewLayoutFor(cfg, OneFOneB, pp, vpp, rank)
}

// NewLayoutFor is NewLayout for schedule kind: DualPipeV's V of two chunks
// per rank (vpp ignored), Megatron's placement of vpp chunks otherwise.
func NewLayoutFor(cfg model.Config, kind Kind, pp, vpp, rank int) (Layout, error) {
	vpp = kind.Chunks(vpp)
	if rank < 0 || rank >= pp {
		return Layout{}, fmt.Errorf("pp: rank %d outside the pipeline of pp=%d", rank, pp)
	}
	counts, err := plan.ChunkLayers(cfg.Layers, pp, vpp)
	if err != nil {
		return Layout{}, fmt.Errorf("pp: model.%w", err)
	}
	l := Layout{PP: pp, VPP: vpp, Rank: rank, V: kind == DualPipeV, Layers: cfg.Layers, Tied: cfg.Tied()}
	lo := 0
	for _, n := range counts {
		l.Bounds = append(l.Bounds, [2]int{lo, lo + n})
		lo += n
	}
	held := map[int]bool{}
	for c := 0; c < vpp; c++ {
		b, first, last := l.Chunk(c)
		for blk := b[0]; blk < b[1]; blk++ {
			held[blk+1] = true
		}
		if first || (last && cfg.Tied()) {
			held[0] = true
		}
		if last {
			held[cfg.Layers+1] = true
		}
	}
	for u := 0; u <= cfg.Layers+1; u++ {
		if held[u] {
			l.Units = append(l.Units, u)
		}
	}
	return l, nil
}

// Chunk is chunk c's blocks and whether it is the first or the last model
// stage.
func (l Layout) Chunk(c int) (bounds [2]int, first, last bool) {
	s := l.Placement().Stage(l.Rank, c)
	return l.Bounds[s], s == 0, s == len(l.Bounds)-1
}

// Placement is the pipeline's stage placement.
func (l Layout) Placement() Placement { return Placement{PP: l.PP, VPP: l.VPP, V: l.V} }

// First says whether this rank runs model stage 0 (the embedding).
func (l Layout) First() bool { return l.Placement().Place(0).Rank == l.Rank }

// Last says whether this rank runs the last model stage (the head): rank
// pp−1, or rank 0 in DualPipeV's V.
func (l Layout) Last() bool { return l.Placement().Place(l.PP*l.VPP-1).Rank == l.Rank }

// TiedAcross says whether this rank holds one of two copies of a tied
// head's unit 0 on different ranks (the first or the last stage, not
// both), whose gradients a tied group sums.
func (l Layout) TiedAcross() bool { return l.Tied && l.PP > 1 && l.First() != l.Last() }

// Blocks is the number of blocks this rank holds.
func (l Layout) Blocks() int {
	n := 0
	for c := 0; c < l.VPP; c++ {
		b, _, _ := l.Chunk(c)
		n += b[1] - b[0]
	}
	return n
}

// Breaks are the units where the rank's state must start a new bucket:
// the first unit of each of its chunks after the first, whose backward
// passes interleave with the others' micro-batches (parallel/zero counts
// a bucket complete per backward pass); none without a pipeline.
func (l Layout) Breaks() []int {
	var out []int
	for c := 1; c < l.VPP; c++ {
		b, _, _ := l.Chunk(c)
		if b[1] > b[0] {
			out = append(out, b[0]+1)
		}
	}
	return out
}
