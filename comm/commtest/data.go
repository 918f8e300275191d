package commtest

import (
	"fmt"
	"math"
	"math/rand/v2"

	"trellis/comm"
	"trellis/tensor"
)

// vals says what inputs a case uses.
type vals int

const (
	// ints are small integers in [-8, 8]: every partial sum of up to 8 of
	// them is exact in bf16 and fp32, whatever the order, so Sum and Max
	// must be exact.
	ints vals = iota
	// reals are uniform in [-1, 1) (rounded to bf16 for bf16 cases):
	// results are checked against rounding-error bounds.
	reals
)

func (v vals) String() string {
	if v == ints {
		return "ints"
	}
	return "reals"
}

// value is element i of rank r's input for a case with salt.
func value(v vals, r, i, salt int, rng *rand.Rand) float64 {
	if v == ints {
		return float64((r*31+i*7+salt)%17 - 8)
	}
	return rng.Float64()*2 - 1
}

// input returns rank r's input of n elements: the Buf and its values.
func input(d tensor.DType, v vals, r, n, salt int) (comm.Buf, []float64) {
	rng := rand.New(rand.NewPCG(uint64(salt), uint64(r)))
	xs := make([]float64, n)
	if d == tensor.BF16 {
		b := make([]tensor.BF16Bits, n)
		for i := range b {
			b[i] = tensor.ToBF16(float32(value(v, r, i, salt, rng)))
			xs[i] = float64(b[i].Float32())
		}
		return comm.BF16(b), xs
	}
	f := make([]float32, n)
	for i := range f {
		f[i] = float32(value(v, r, i, salt, rng))
		xs[i] = float64(f[i])
	}
	return comm.F32(f), xs
}

// newBuf returns a Buf of n elements filled with a marker value, so that
// elements an op fails to write are noticed.
func newBuf(d tensor.DType, n int) comm.Buf {
	if d == tensor.BF16 {
		b := make([]tensor.BF16Bits, n)
		for i := range b {
			b[i] = tensor.ToBF16(-1234)
		}
		return comm.BF16(b)
	}
	f := make([]float32, n)
	for i := range f {
		f[i] = -1234
	}
	return comm.F32(f)
}

// at returns element i of b as float64.
func at(b comm.Buf, i int) float64 {
	if b.DType() == tensor.BF16 {
		return float64(b.BFloat16s()[i].Float32())
	}
	return float64(b.Float32s()[i])
}

// bits returns element i's bit pattern.
func bits(b comm.Buf, i int) uint32 {
	if b.DType() == tensor.BF16 {
		return uint32(b.BFloat16s()[i])
	}
	return math.Float32bits(b.Float32s()[i])
}

// expect is the exact result of a reduction over ranks, element by element,
// and the bound on each element's rounding error.
type expect struct {
	want, tol []float64
}

// unitRoundoff is half an ulp at 1: 2⁻²⁴ for fp32, 2⁻⁸ for bf16.
func unitRoundoff(d tensor.DType) float64 {
	if d == tensor.BF16 {
		return 0x1p-8
	}
	return 0x1p-24
}

// reduceExpect folds the ranks' inputs xs[r] with op. The error bound: a
// backend may round the running result once per step (at most p roundings of
// a value no larger than A = Σ|x|), so |got − S| ≤ p·u·A for Sum; Avg scales
// the sum by fl(1/p) and rounds once more, so |got − S/p| ≤ (p·u·A + 3u|S|)/p;
// Max is exact. With ints every partial sum is exact, leaving only Avg's
// final scaling.
func reduceExpect(xs [][]float64, op comm.ReduceOp, d tensor.DType, v vals) expect {
	p, n := len(xs), len(xs[0])
	u := unitRoundoff(d)
	e := expect{want: make([]float64, n), tol: make([]float64, n)}
	for i := 0; i < n; i++ {
		s, a, m := 0.0, 0.0, math.Inf(-1)
		for r := 0; r < p; r++ {
			x := xs[r][i]
			s += x
			a += math.Abs(x)
			m = math.Max(m, x)
		}
		accum := float64(p) * u * a // rounding of partial sums
		if v == ints {
			accum = 0
		}
		switch op {
		case comm.Sum:
			e.want[i], e.tol[i] = s, accum
		case comm.Avg:
			e.want[i], e.tol[i] = s/float64(p), (accum+3*u*math.Abs(s))/float64(p)
		case comm.Max:
			e.want[i] = m
		}
	}
	return e
}

// check compares got[off:] with e.
func (e expect) check(got comm.Buf, off int) error {
	for i := range e.want {
		g := at(got, off+i)
		if d := math.Abs(g - e.want[i]); !(d <= e.tol[i]) {
			return fmt.Errorf("element %d = %g, want %g ± %g (off by %g)", off+i, g, e.want[i], e.tol[i], d)
		}
	}
	return nil
}

// exact compares got[off:off+len(want)] with want exactly.
func exact(got comm.Buf, off int, want []float64) error {
	for i, w := range want {
		if g := at(got, off+i); g != w {
			return fmt.Errorf("element %d = %g, want %g", off+i, g, w)
		}
	}
	return nil
}

// sameBits reports the first element where a and b differ in bits.
func sameBits(a, b comm.Buf) error {
	if a.Len() != b.Len() {
		return fmt.Errorf("lengths %d and %d", a.Len(), b.Len())
	}
	for i := 0; i < a.Len(); i++ {
		if bits(a, i) != bits(b, i) {
			return fmt.Errorf("element %d: %g vs %g", i, at(a, i), at(b, i))
		}
	}
	return nil
}

// column returns xs[r][lo:hi] for every r.
func column(xs [][]float64, lo, hi int) [][]float64 {
	out := make([][]float64, len(xs))
	for r, x := range xs {
		out[r] = x[lo:hi]
	}
	return out
}

// clone returns a copy of b.
func clone(b comm.Buf) comm.Buf {
	c := newBuf(b.DType(), b.Len())
	copyInto(c, b)
	return c
}
