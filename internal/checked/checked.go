// Package checked multiplies and adds sizes that come from user input
// without wrapping: every product of dimensions (m·k, B·T·V, L·(12C²+13C))
// goes through Mul or Product, and an overflow is an error the caller
// reports with the field names, never a negative length that panics later.
package checked

import (
	"errors"
	"math"
	"math/bits"
)

// ErrOverflow is returned (wrapped by callers) when a product or sum does
// not fit an int64.
var ErrOverflow = errors.New("overflows a 64-bit integer")

// Mul returns a·b, or ok=false when the exact product is outside int64.
func Mul(a, b int64) (p int64, ok bool) {
	if a == 0 || b == 0 {
		return 0, true
	}
	neg := (a < 0) != (b < 0)
	hi, lo := bits.Mul64(abs(a), abs(b))
	if hi != 0 {
		return 0, false
	}
	if neg {
		if lo > 1<<63 {
			return 0, false
		}
		return -int64(lo), true // lo == 1<<63 wraps to MinInt64, which is exact
	}
	if lo > math.MaxInt64 {
		return 0, false
	}
	return int64(lo), true
}

// Add returns a+b, or ok=false when the exact sum is outside int64.
func Add(a, b int64) (s int64, ok bool) {
	s = a + b
	// Overflow happened iff a and b have the same sign and s has the other.
	if (a >= 0) == (b >= 0) && (s >= 0) != (a >= 0) {
		return 0, false
	}
	return s, true
}

// Product returns the product of xs (1 for none), or ok=false on overflow.
// Any zero factor makes the product 0, even after an overflowing prefix.
func Product(xs ...int64) (int64, bool) {
	p, ok := int64(1), true
	for _, x := range xs {
		if x == 0 {
			return 0, true
		}
	}
	for _, x := range xs {
		if p, ok = Mul(p, x); !ok {
			return 0, false
		}
	}
	return p, true
}

// Ints is Product over ints, for dimensions held as int; ok=false also
// when the product does not fit an int.
func Ints(xs ...int) (int, bool) {
	p, ok := int64(1), true
	for _, x := range xs {
		if x == 0 {
			return 0, true
		}
	}
	for _, x := range xs {
		if p, ok = Mul(p, int64(x)); !ok {
			return 0, false
		}
	}
	if int64(int(p)) != p {
		return 0, false
	}
	return int(p), true
}

func abs(x int64) uint64 {
	if x < 0 {
		return uint64(-(x + 1)) + 1 // MinInt64 too
	}
	return uint64(x)
}
