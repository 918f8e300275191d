package pp

import (
	"fmt"

	"trellis/model"
	"trellis/plan"
)

// Layout is where the model lives on one pipeline rank: the blocks of each
// of its chunks, split over the pp·vpp model stages by the planner's rule
// (plan.ChunkLayers: the lighter stages at the ends), and the parameter
// units it holds. Stage 0 also holds the embedding (unit 0); stage
// pp·vpp−1 the final norm (unit L+1, with an untied LM head) and, for the
// tied LM head, unit 0 again: the two copies stay equal because their
// gradients are summed before each update.
type Layout struct {
	PP, VPP, Rank int
	Layers        int      // L
	Tied          bool     // the LM head is unit 0's embedding (the last stage holds unit 0 too)
	Bounds        [][2]int // (pp·vpp) per model stage: blocks [lo, hi)
	Units         []int    // the global units this rank holds, ascending
}

// NewLayout splits cfg's layers for rank of a pp×vpp pipeline.
func NewLayout(cfg model.Config, pp, vpp, rank int) (Layout, error) {
	vpp = max(vpp, 1)
	if rank < 0 || rank >= pp {
		return Layout{}, fmt.Errorf("pp: rank %d outside the pipeline of pp=%d", rank, pp)
	}
	counts, err := plan.ChunkLayers(cfg.Layers, pp, vpp)
	if err != nil {
		return Layout{}, fmt.Errorf("pp: model.%w", err)
	}
	l := Layout{PP: pp, VPP: vpp, Rank: rank, Layers: cfg.Layers, Tied: cfg.Tied()}
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
	s := c*l.PP + l.Rank
	return l.Bounds[s], s == 0, s == len(l.Bounds)-1
}

// First says whether this rank runs model stage 0 (the embedding).
func (l Layout) First() bool { return l.Rank == 0 }

// Last says whether this rank runs the last model stage (the head).
func (l Layout) Last() bool { return l.Rank == l.PP-1 }

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
