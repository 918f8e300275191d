package optim

import (
	"fmt"
	"sort"
)

// Range is the half-open interval [Off, Off+Len) of the global flat
// parameter buffer.
type Range struct {
	Off, Len int
}

// End is Off+Len.
func (r Range) End() int { return r.Off + r.Len }

// Tensor locates one parameter tensor in the global flat buffer.
type Tensor struct {
	Name  string
	Off   int   // index of its first element in the flat buffer
	Shape []int // its dims; the tensor holds their product elements
}

// Decay2D returns the ranges that receive weight decay under the GPT-2 /
// nanoGPT / llm.c rule: every tensor with two or more dims (the matmul
// weights and the token and position embeddings) is decayed; one-dim
// tensors (biases, LayerNorm gains and shifts) are not. Adjacent ranges are
// merged; the result is sorted.
func Decay2D(ts []Tensor) []Range {
	var rs []Range
	for _, t := range ts {
		if len(t.Shape) < 2 {
			continue
		}
		n := 1
		for _, d := range t.Shape {
			n *= d
		}
		if n > 0 {
			rs = append(rs, Range{Off: t.Off, Len: n})
		}
	}
	return normalize(rs)
}

// normalize sorts ranges and merges adjacent ones (overlaps are checked by
// checkRanges, not merged here).
func normalize(rs []Range) []Range {
	out := append([]Range(nil), rs...)
	sort.Slice(out, func(i, j int) bool { return out[i].Off < out[j].Off })
	merged := out[:0]
	for _, r := range out {
		if n := len(merged); n > 0 && merged[n-1].End() == r.Off {
			merged[n-1].Len += r.Len
			continue
		}
		merged = append(merged, r)
	}
	if merged == nil {
		merged = []Range{}
	}
	return merged
}

// checkRanges verifies that ranges are non-empty, non-negative and do not
// overlap.
func checkRanges(rs []Range) error {
	s := append([]Range(nil), rs...)
	sort.Slice(s, func(i, j int) bool { return s[i].Off < s[j].Off })
	for i, r := range s {
		if r.Off < 0 || r.Len <= 0 {
			return fmt.Errorf("optim: decay range [%d,+%d) must have off >= 0 and len > 0", r.Off, r.Len)
		}
		if i > 0 && s[i-1].End() > r.Off {
			return fmt.Errorf("optim: decay ranges [%d,%d) and [%d,%d) overlap", s[i-1].Off, s[i-1].End(), r.Off, r.End())
		}
	}
	return nil
}

// segment is a local interval [lo, hi) of a shard with one decay flag.
type segment struct {
	lo, hi int
	decay  bool
}

// segments cuts the shard [off, off+n) of the global buffer into maximal
// intervals that are entirely decayed or entirely not, in local coordinates.
func segments(off, n int, decay []Range) []segment {
	var segs []segment
	pos := 0 // local position covered so far
	for _, r := range normalize(decay) {
		lo, hi := max(r.Off-off, 0), min(r.End()-off, n)
		if lo >= hi {
			continue
		}
		if lo > pos {
			segs = append(segs, segment{pos, lo, false})
		}
		segs = append(segs, segment{lo, hi, true})
		pos = hi
	}
	if pos < n {
		segs = append(segs, segment{pos, n, false})
	}
	return segs
}
