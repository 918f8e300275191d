package zero

import (
	"fmt"

	"trellis/model"
	"trellis/parallel/flat"
	"trellis/tensor"
)

// Shape is what a rank's memory under ZeRO depends on.
type Shape struct {
	Model       model.Config
	Stage       int // 1, 2 or 3
	Ranks       int // N
	Rank        int // this rank, 0 <= Rank < N
	BucketElems int
	Overlap     bool
	// Part is the piece of the model the rank holds under tensor
	// parallelism (zero value: the whole model); the buckets are its.
	Part model.Part
	// Half is Config.Half: under stages 1 and 2, bf16 or fp16 weights and
	// master weights sharded (on a device with MasterWeights).
	Half tensor.DType
	// Accum is the micro-batches per optimizer step; only with more than
	// one (or 0: not known) does a reduction need a temporary chunk.
	Accum int
}

// Memory is what one rank charges to each tag, in bytes. Param, Grad and
// Optim are exact; Comm is an upper bound of the communication buffers'
// peak (the package doc lists them).
type Memory struct {
	Param, Grad, Optim, Comm int64
}

// State is Param + Grad + Optim.
func (m Memory) State() int64 { return m.Param + m.Grad + m.Optim }

// Memory returns the accounting of the package doc for the shape. With
// P = Σ_buckets Padded (Ψ plus under N elements per bucket), B and c the
// largest bucket's Padded and Chunk, and E the Padded of the embedding's
// bucket, in fp32:
//
//	param  4P (stages 1, 2), 4P/N (3)
//	grad   4P (stage 1), 4P/N (2, 3)
//	optim  8·(this rank's unpadded share of Ψ)
//	comm   stage 1: 0
//	       stage 2: 4·((1+k)·B + E + k·c') with overlap, 4·(P + c') without
//	       stage 3: stage 2's + 4·2B (the bucket in use and the prefetched one)
//
// With Half under stages 1 and 2 (half.go; a device with MasterWeights,
// which charges the fp32 master chunks to optim): param 2P (the 16-bit
// weights), optim 4P/N + 8·share; and the unit in use widened, tag
// workspace, is not counted here.
//
// where k = maxInflight reductions may be in flight (each holding a full
// bucket and, after a step's first micro-batch, a chunk: c' = c when
// Accum != 1, else 0); besides them the bucket being filled and the
// embedding's, which the tied head starts at the top of the backward pass
// and the embedding finishes at its bottom. Reductions are reaped at fixed
// points of the rank's schedule (see reduce), so the measured peak does
// not depend on the network's timing; this bound is reached when two of
// the largest buckets are neighbours below the embedding's (many buckets),
// and over-counts a bucket when the embedding's is the only one.
func (s Shape) Memory() (Memory, error) {
	if s.Stage < 1 || s.Stage > 3 || s.Ranks < 1 || s.Rank < 0 || s.Rank >= s.Ranks {
		return Memory{}, fmt.Errorf("zero: stage %d, rank %d of %d: want stage 1..3 and 0 <= rank < ranks", s.Stage, s.Rank, s.Ranks)
	}
	if err := s.Model.Validate(); err != nil {
		return Memory{}, err
	}
	lay := s.Model.PartLayout(s.Part)
	sizes := make([]int, len(lay.Units))
	for i, u := range lay.Units {
		sizes[i] = u.Size
	}
	bl, err := flat.New(flat.Config{UnitSizes: sizes, MaxElems: s.BucketElems, Ranks: s.Ranks})
	if err != nil {
		return Memory{}, fmt.Errorf("zero: %w", err)
	}
	P, N := int64(bl.Padded), int64(s.Ranks)
	var big, chunk, share int64
	emb := int64(bl.Buckets[bl.Of(0)].Padded)
	for _, b := range bl.Buckets {
		big, chunk = max(big, int64(b.Padded)), max(chunk, int64(b.Chunk()))
		_, n := b.Shard(s.Rank)
		share += int64(n)
	}
	m := Memory{Param: 4 * P, Grad: 4 * P, Optim: 8 * share}
	if s.Stage >= 2 {
		m.Grad = 4 * P / N
		if s.Accum == 1 {
			chunk = 0
		}
		k := int64(maxInflight)
		m.Comm = 4 * ((1+k)*big + emb + k*chunk)
		if !s.Overlap {
			m.Comm = 4 * (P + chunk)
		}
	}
	if s.Stage == 3 {
		m.Param = 4 * P / N
		m.Comm += 4 * 2 * big
	}
	if s.Half != tensor.F32 && s.Stage < 3 {
		m.Param, m.Optim = 2*P, 4*P/N+m.Optim
	}
	return m, nil
}

// Memory is this strategy's accounting (see Shape.Memory).
func (s *Strategy) Memory() Memory {
	m, _ := Shape{Model: s.cfg.Model, Stage: s.cfg.Stage, Ranks: s.n, Rank: s.r,
		BucketElems: s.cfg.BucketElems, Overlap: s.cfg.Overlap, Part: s.cfg.Part, Half: s.cfg.Half, Accum: s.accum}.Memory()
	return m
}
