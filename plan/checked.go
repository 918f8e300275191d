package plan

import "math/bits"

// divides reports whether the product of xs divides n (n ≥ 1), without
// computing a product that overflows.
func divides(n int, xs ...int) bool {
	d, ok := product(n, xs...)
	return ok && n%d == 0
}

// product is the product of positive counts from outside (degrees, batch
// sizes), or ok=false when one is not positive or the product exceeds
// limit (or overflows): the planner never divides by a product that
// wrapped to 0 or went negative. (internal/checked's, kept here: the
// planner imports no Trellis package.)
func product(limit int, xs ...int) (int, bool) {
	p := uint64(1)
	for _, x := range xs {
		if x < 1 {
			return 0, false
		}
		hi, lo := bits.Mul64(p, uint64(x))
		if hi != 0 || lo > uint64(limit) {
			return 0, false
		}
		p = lo
	}
	return int(p), true
}
