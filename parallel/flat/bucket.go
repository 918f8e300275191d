// Package flat holds what data parallelism (parallel/dp) and ZeRO
// (parallel/zero) share: the partition of a model's units into buckets,
// flat buffers padded so that every bucket splits evenly across the ranks of
// a group, asynchronous collectives whose exposed waiting is timed, and the
// conversion between ranges of the flat parameter vector and per-tensor
// checkpoint shards.
//
// Buckets. The flat parameter vector is a sequence of units (embedding,
// blocks, final LayerNorm), each a contiguous range. A bucket is a run of
// consecutive units [First, Last], of Len elements starting at Offset. For a
// group of N ranks the bucket is padded to Padded = ⌈Len/N⌉·N elements and
// split into N equal chunks of c = Padded/N: rank r owns the chunk
// [r·c, (r+1)·c) of every bucket, so a bucket's reduce-scatter and all-gather
// are equal-chunk collectives. Of rank r's chunk, the first Shard(r).n
// elements are the global elements [Shard(r).lo, Shard(r).lo+n) and the rest
// (at most N−1 elements per bucket, all on the last ranks) is padding.
//
// In a padded flat buffer bucket b occupies [POffset, POffset+Padded); a
// buffer of shards only holds rank r's chunks back to back, bucket b's at
// POffset/N.
package flat

import "fmt"

// Config describes how to bucket a flat vector of units.
type Config struct {
	// UnitSizes are the units' element counts, in flat order (unit u starts
	// where unit u−1 ends).
	UnitSizes []int
	// MaxElems caps a bucket's Len: consecutive units are grouped while they
	// fit, from the last unit down (the order in which a backward pass
	// finishes them), so the first bucket to fill is ready first. A unit
	// larger than MaxElems is a bucket of its own. 0 puts every unit in its
	// own bucket.
	MaxElems int
	// Ranks is the group size N that every bucket is padded to a multiple of.
	Ranks int
	// Breaks are units that start a bucket whatever MaxElems says: a
	// bucket never holds both unit u−1 and unit u for u in Breaks (a
	// pipeline rank's chunks, whose backward passes interleave; a tied unit
	// that must be laid out alike on the ranks that hold it).
	Breaks []int
}

// Validate names the first field that breaks its rule.
func (c Config) Validate() error {
	switch {
	case len(c.UnitSizes) == 0:
		return fmt.Errorf("flat: UnitSizes is empty")
	case c.MaxElems < 0:
		return fmt.Errorf("flat: MaxElems=%d must be >= 0", c.MaxElems)
	case c.Ranks < 1:
		return fmt.Errorf("flat: Ranks=%d must be >= 1", c.Ranks)
	}
	for u, n := range c.UnitSizes {
		if n < 1 {
			return fmt.Errorf("flat: UnitSizes[%d]=%d must be >= 1", u, n)
		}
	}
	return nil
}

// Bucket is a run of consecutive units that is reduced, and under ZeRO
// sharded and gathered, as one flat buffer.
type Bucket struct {
	First, Last int // its units, inclusive
	Offset      int // of its first element in the (unpadded) flat vector
	Len         int // elements
	Padded      int // Len rounded up to a multiple of Ranks
	POffset     int // of its first element in a padded flat buffer
	Ranks       int // N
}

// Chunk is c = Padded/N, the elements of one rank's chunk.
func (b Bucket) Chunk() int { return b.Padded / b.Ranks }

// Shard returns rank r's part of the bucket: its chunk holds the global
// elements [lo, lo+n) in its first n places (n < Chunk only for padding).
func (b Bucket) Shard(r int) (lo, n int) {
	c := b.Chunk()
	start := min(r*c, b.Len)
	end := min((r+1)*c, b.Len)
	return b.Offset + start, end - start
}

// Layout is a flat vector cut into buckets.
type Layout struct {
	Buckets []Bucket // in flat order (ascending units)
	Size    int      // elements of the unpadded vector
	Padded  int      // elements of a padded buffer: Σ Bucket.Padded
	Ranks   int
	of      []int // unit → bucket
	start   []int // unit → its offset in the flat vector
}

// New groups the units into buckets.
func New(c Config) (*Layout, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	l := &Layout{Ranks: c.Ranks, of: make([]int, len(c.UnitSizes)), start: make([]int, len(c.UnitSizes))}
	for u, n := range c.UnitSizes {
		l.start[u] = l.Size
		l.Size += n
	}
	// Group from the last unit down, then number the buckets in flat order.
	var groups [][2]int // [first, last]
	brk := map[int]bool{}
	for _, u := range c.Breaks {
		brk[u] = true
	}
	last, size := len(c.UnitSizes)-1, 0
	for u := len(c.UnitSizes) - 1; u >= 0; u-- {
		n := c.UnitSizes[u]
		if u < last && (c.MaxElems == 0 || size+n > c.MaxElems || brk[u+1]) {
			groups = append(groups, [2]int{u + 1, last})
			last, size = u, 0
		}
		size += n
	}
	groups = append(groups, [2]int{0, last})
	for i := len(groups) - 1; i >= 0; i-- {
		g := groups[i]
		b := Bucket{First: g[0], Last: g[1], Offset: l.start[g[0]], Ranks: c.Ranks, POffset: l.Padded}
		b.Len = l.start[g[1]] + c.UnitSizes[g[1]] - b.Offset
		b.Padded = (b.Len + c.Ranks - 1) / c.Ranks * c.Ranks
		l.Padded += b.Padded
		for u := g[0]; u <= g[1]; u++ {
			l.of[u] = len(l.Buckets)
		}
		l.Buckets = append(l.Buckets, b)
	}
	return l, nil
}

// Units is the number of units.
func (l *Layout) Units() int { return len(l.of) }

// Of returns the index of the bucket that holds unit u.
func (l *Layout) Of(u int) int { return l.of[u] }

// InBucket returns where unit u lies inside its bucket: elements
// [pos, pos+n) of the bucket's buffer.
func (l *Layout) InBucket(u int) (pos, n int) {
	b := l.Buckets[l.of[u]]
	end := l.Size
	if u+1 < len(l.start) {
		end = l.start[u+1]
	}
	return l.start[u] - b.Offset, end - l.start[u]
}

// CheckUnit returns an error unless 0 <= u < Units().
func (l *Layout) CheckUnit(u int) error {
	if u < 0 || u >= len(l.of) {
		return fmt.Errorf("unit %d out of range [0, %d)", u, len(l.of))
	}
	return nil
}
