package zero

import (
	"fmt"

	"trellis/arch"
	"trellis/parallel/flat"
)

// buckets cuts a rank's layout into buckets as New does: units grouped up
// to BucketElems (0: one per bucket, −1: one bucket), a bucket starting
// at each of Breaks and, from stage 2, a tied unit alone (its shards are
// summed element by element over its holders); padded to the group's n
// ranks, or to one at stage 0 (nothing is sharded). local maps global
// unit numbers to the layout's.
func buckets(lay arch.Layout, stage, n, bucketElems int, breaks, tied []int) (*flat.Layout, map[int]int, error) {
	sizes := make([]int, len(lay.Units))
	local := map[int]int{}
	for i, u := range lay.Units {
		sizes[i] = u.Size
		local[u.Index] = i
	}
	if stage == 0 {
		n = 1
	}
	var br []int
	for _, u := range breaks {
		if i, ok := local[u]; ok {
			br = append(br, i)
		}
	}
	if stage >= 2 {
		for _, u := range tied {
			if i, ok := local[u]; ok {
				br = append(br, i, i+1)
			}
		}
	}
	if bucketElems < 0 {
		bucketElems = lay.Size
	}
	bl, err := flat.New(flat.Config{UnitSizes: sizes, MaxElems: bucketElems, Ranks: n, Breaks: br})
	if err != nil {
		return nil, nil, fmt.Errorf("zero: %w", err)
	}
	return bl, local, nil
}

// Shape is what a rank's memory under this strategy depends on.
type Shape struct {
	Layout      arch.Layout // the rank's units and parts (Config.Layout)
	Stage       int         // 0..3
	Ranks       int         // N
	Rank        int         // this rank, 0 <= Rank < N
	BucketElems int
	Breaks      []int
	TiedUnits   []int
	// Untied: the LM head has weights of its own (a Llama's lm_head, in
	// the final norm's unit), so nothing opens unit 0's bucket before the
	// embedding's backward, which ends the pass.
	Untied  bool
	Overlap bool
	// Mixed: a bf16 or fp16 policy (Param-dtype weights of fp32 masters).
	Mixed bool
	// Split: a zero-bubble schedule's split backward, whose input pass
	// opens every block's bucket before its weight pass completes any.
	Split bool
	// Accum is the micro-batches per optimizer step; only with more than
	// one (or 0: not known) does a reduction need a temporary chunk.
	Accum int
}

// Memory is what one rank charges to each tag, in bytes. Param, Grad and
// Optim are exact (but for stage 3's per-unit roundings under a mixed
// policy, which are the fetched units'); Comm is an upper bound of the
// communication buffers' peak (the package doc lists them).
type Memory struct {
	Param, Grad, Optim, Comm int64
}

// State is Param + Grad + Optim.
func (m Memory) State() int64 { return m.Param + m.Grad + m.Optim }

// Memory returns the accounting of the package doc for the shape. With
// P = Σ_buckets Padded (Ψ plus under N elements per bucket; Ψ at stage 0),
// B and c the largest bucket's Padded and Chunk, and E the Padded of the
// bucket of unit 0 (when held):
//
//	             fp32                       mixed (bf16, fp16)
//	param  0-2   4P                         2P          (the Param-dtype weights)
//	       3     4P/N                       0           (+ 2u per fetched unit)
//	grad         4P (stages 0, 1), 4P/N (2, 3)
//	optim        8·(this rank's share of Ψ)  + 4P (stage 0) or 4P/N: the masters
//	comm   0, 1  0
//	       2     4·((f+k)·B + E + k·c') with overlap, 4·(P + c') without
//	       3     stage 2's + 4·2B (the bucket in use and the prefetched one)
//
// where f = 1 bucket is being filled (under a split backward, every
// bucket but the embedding's), k = maxInflight reductions may be in flight (each holding a full
// bucket and, after a bucket's first reduction in a step, a chunk: c' = c
// when Accum != 1, else 0); besides them the bucket being filled and the
// embedding's, which the tied head starts at the top of the backward pass
// and the embedding finishes at its bottom (E = 0 on a pipeline stage,
// Shape.TiedUnits set: it holds the embedding or the head, not both; and
// E = 0 for an untied head, Shape.Untied). Reductions are reaped at fixed
// points of the rank's schedule (see reduce), so the measured peak does
// not depend on the network's timing; this bound is reached when two of
// the largest buckets are neighbours below the embedding's.
func (s Shape) Memory() (Memory, error) {
	if s.Stage < 0 || s.Stage > 3 || s.Ranks < 1 || s.Rank < 0 || s.Rank >= s.Ranks || len(s.Layout.Units) == 0 {
		return Memory{}, fmt.Errorf("zero: stage %d, rank %d of %d: want stage 0..3, 0 <= rank < ranks and a layout", s.Stage, s.Rank, s.Ranks)
	}
	bl, local, err := buckets(s.Layout, s.Stage, s.Ranks, s.BucketElems, s.Breaks, s.TiedUnits)
	if err != nil {
		return Memory{}, err
	}
	P, N := int64(bl.Padded), int64(bl.Ranks)
	owner := s.Rank
	if s.Stage == 0 {
		owner = 0
	}
	var big, chunk, share, emb int64
	if i, ok := local[0]; ok && len(s.TiedUnits) == 0 && !s.Untied {
		// The embedding's bucket, which the tied head starts at the top
		// of the backward pass and the embedding finishes at its bottom;
		// a pipeline stage holds one of the two, and its unit-0 bucket
		// completes at once.
		emb = int64(bl.Buckets[bl.Of(i)].Padded)
	}
	for _, b := range bl.Buckets {
		big, chunk = max(big, int64(b.Padded)), max(chunk, int64(b.Chunk()))
		_, n := b.Shard(owner)
		share += int64(n)
	}
	m := Memory{Param: 4 * P, Grad: 4 * P, Optim: 8 * share}
	if s.Stage >= 2 {
		m.Grad = 4 * P / N
		if s.Accum == 1 {
			chunk = 0
		}
		k := int64(maxInflight)
		filling := int64(1)
		if s.Split {
			// Every bucket but the embedding's may be open at once: the
			// input pass adds its biases' and norms' gradients to all of
			// them before the weight pass completes the first.
			filling = int64(len(bl.Buckets))
			if _, ok := local[0]; ok {
				filling--
			}
			filling = max(filling, 1)
		}
		m.Comm = 4 * ((filling+k)*big + emb + k*chunk)
		if !s.Overlap {
			m.Comm = 4 * (P + chunk)
		}
	}
	if s.Stage == 3 {
		m.Param = 4 * P / N
		m.Comm += 4 * 2 * big
	}
	if s.Mixed {
		switch s.Stage {
		case 0:
			m.Param, m.Optim = 2*P, 4*P+m.Optim
		case 3:
			m.Param, m.Optim = 0, 4*P/N+m.Optim
		default:
			m.Param, m.Optim = 2*P, 4*P/N+m.Optim
		}
	}
	return m, nil
}

// Memory is this strategy's accounting (see Shape.Memory).
func (s *Strategy) Memory() Memory {
	m, _ := Shape{Layout: s.cfg.Layout, Stage: s.cfg.Stage, Ranks: s.n, Rank: s.r, BucketElems: s.cfg.BucketElems,
		Breaks: s.cfg.Breaks, TiedUnits: s.cfg.TiedUnits, Untied: !s.cfg.Model.Tied(), Overlap: s.cfg.Overlap, Mixed: s.mixed(), Accum: s.accum}.Memory()
	return m
}
