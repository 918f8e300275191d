package comm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"trellis/tensor"
)

// refFold is the documented result: fold left to right in fp32, scale, and
// for bf16 round once.
func refFold(xs [][]float32, op ReduceOp, avgOver int, i int) float32 {
	a := xs[0][i]
	for _, x := range xs[1:] {
		switch op {
		case Max:
			if x[i] > a || x[i] != x[i] {
				a = x[i]
			}
		default:
			a += x[i]
		}
	}
	if op == Avg && avgOver > 0 {
		a *= AvgScale(avgOver)
	}
	return a
}

func randomSources(rng *rand.Rand, d tensor.DType, k, n int) ([]Buf, [][]float32) {
	bufs := make([]Buf, k)
	vals := make([][]float32, k)
	for j := range bufs {
		vals[j] = make([]float32, n)
		for i := range vals[j] {
			vals[j][i] = float32(rng.NormFloat64() * 100)
		}
		if d == tensor.BF16 {
			h := make([]tensor.BF16Bits, n)
			tensor.EncodeBF16(h, vals[j])
			tensor.DecodeBF16(vals[j], h)
			bufs[j] = BF16(h)
		} else {
			bufs[j] = F32(append([]float32(nil), vals[j]...))
		}
	}
	return bufs, vals
}

func elemBits(b Buf, i int) uint32 {
	if b.DType() == tensor.BF16 {
		return uint32(b.BFloat16s()[i])
	}
	return math.Float32bits(b.Float32s()[i])
}

// TestReduceToMatchesLeftFold checks bit-exact agreement with the documented
// left-to-right fp32 fold for every source count (padding and several
// passes), lengths around the block size, in place and into extra buffers.
func TestReduceToMatchesLeftFold(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, d := range []tensor.DType{tensor.F32, tensor.BF16} {
		for _, op := range []ReduceOp{Sum, Avg, Max} {
			for _, k := range []int{1, 2, 3, 4, 5, 8, 9} {
				for _, n := range []int{0, 1, 5, reduceBlock, reduceBlock + 3, 2*reduceBlock + 17} {
					for _, inPlace := range []bool{false, true} {
						name := fmt.Sprintf("%v/%v/k=%d/n=%d/inplace=%v", d, op, k, n, inPlace)
						srcs, vals := randomSources(rng, d, k, n)
						dsts := srcs
						if !inPlace {
							dsts, _ = randomSources(rng, d, 2, n)
						}
						ReduceTo(dsts, srcs, op, k)
						for i := 0; i < n; i++ {
							want := refFold(vals, op, k, i)
							var wantBits uint32
							if d == tensor.BF16 {
								wantBits = uint32(tensor.ToBF16(want))
							} else {
								wantBits = math.Float32bits(want)
							}
							for j, dst := range dsts {
								if got := elemBits(dst, i); got != wantBits {
									t.Fatalf("%s: dst %d element %d: bits %#x, want %#x (%g)", name, j, i, got, wantBits, want)
								}
							}
						}
					}
				}
			}
		}
	}
}

func TestReduceSpecials(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	negZero := float32(math.Copysign(0, -1))
	cases := []struct {
		name string
		op   ReduceOp
		a, b float32
		want float32 // NaN means NaN
	}{
		{"max NaN first", Max, nan, 1, nan},
		{"max NaN second", Max, 1, nan, nan},
		{"max inf", Max, -inf, 3, 3},
		{"sum inf", Sum, inf, 1, inf},
		{"sum overflow", Sum, math.MaxFloat32, math.MaxFloat32, inf},
		{"avg of two", Avg, 1, 2, 1.5},
		{"sum of negative zeros", Sum, negZero, negZero, negZero},
	}
	for _, c := range cases {
		for _, d := range []tensor.DType{tensor.F32, tensor.BF16} {
			var x, y Buf
			if d == tensor.BF16 {
				x, y = BF16([]tensor.BF16Bits{tensor.ToBF16(c.a)}), BF16([]tensor.BF16Bits{tensor.ToBF16(c.b)})
			} else {
				x, y = F32([]float32{c.a}), F32([]float32{c.b})
			}
			Reduce(x, []Buf{x, y}, c.op, 2)
			got := float32(0)
			if d == tensor.BF16 {
				got = x.BFloat16s()[0].Float32()
			} else {
				got = x.Float32s()[0]
			}
			want := c.want
			if d == tensor.BF16 {
				want = tensor.ToBF16(want).Float32()
			}
			if (want != want) != (got != got) || (want == want && math.Float32bits(got) != math.Float32bits(want)) {
				t.Errorf("%s %v: got %g, want %g", c.name, d, got, want)
			}
		}
	}
}

// TestSingleNegativeZero: a one-source sum keeps −0 (padding must not turn
// it into +0).
func TestSingleNegativeZero(t *testing.T) {
	x := F32([]float32{float32(math.Copysign(0, -1))})
	h := BF16([]tensor.BF16Bits{0x8000})
	for k := 1; k <= 5; k++ {
		srcs := []Buf{x, x, x, x, x}[:k]
		Reduce(x, srcs, Sum, 0)
		hs := []Buf{h, h, h, h, h}[:k]
		Reduce(h, hs, Sum, 0)
		if math.Float32bits(x.Float32s()[0]) != 0x80000000 || h.BFloat16s()[0] != 0x8000 {
			t.Fatalf("k=%d: −0 summed to %g / %#x", k, x.Float32s()[0], h.BFloat16s()[0])
		}
	}
}

func TestAvgScale(t *testing.T) {
	for n := 1; n <= 64; n++ {
		s := AvgScale(n)
		if d := math.Abs(float64(s)*float64(n) - 1); d > 0x1p-24 {
			t.Errorf("AvgScale(%d) = %g: s·n off by %g", n, s, d)
		}
	}
	if AvgScale(8) != 0.125 {
		t.Error("AvgScale(8) is not exact")
	}
}

func TestReducePanicsOnMixedDtypes(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("mixed dtypes did not panic")
		}
	}()
	Reduce(F32(make([]float32, 2)), []Buf{BF16(make([]tensor.BF16Bits, 2))}, Sum, 0)
}

// TestSumKernelsAreTheScalarLoops: the AVX-512 sums give the scalar
// loops' bits on every length around the vector width (the masked tail),
// on values that include −0, ±Inf, NaN, subnormals and cancellations,
// with the destination aliasing a source.
func TestSumKernelsAreTheScalarLoops(t *testing.T) {
	if !haveAVX512 {
		t.Skip("no AVX-512 on this CPU")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	special := []float32{float32(math.Copysign(0, -1)), 0, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32 * 3, 1e38, -1e38, 1, -1}
	val := func() float32 {
		if rng.IntN(8) == 0 {
			return special[rng.IntN(len(special))]
		}
		return float32(rng.NormFloat64()) * float32(math.Pow(10, float64(rng.IntN(9)-4)))
	}
	same := func(a, b []float32) bool {
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) && !(a[i] != a[i] && b[i] != b[i]) {
				return false
			}
		}
		return true
	}
	for _, n := range []int{1, 2, 15, 16, 17, 31, 32, 33, 100, 2048} {
		xs := make([][]float32, 5)
		for i := range xs {
			xs[i] = make([]float32, n)
			for j := range xs[i] {
				xs[i][j] = val()
			}
		}
		want := make([]float32, n)
		for i := range want {
			want[i] = xs[0][i] + xs[1][i] + xs[2][i] + xs[3][i]
		}
		got := make([]float32, n)
		sum4F32AVX512(&got[0], &xs[0][0], &xs[1][0], &xs[2][0], &xs[3][0], n)
		if !same(got, want) {
			t.Errorf("n=%d: sum4F32AVX512 differs from the scalar loop", n)
		}
		alias := append([]float32(nil), xs[2]...)
		sum4F32AVX512(&alias[0], &xs[0][0], &xs[1][0], &alias[0], &xs[3][0], n)
		if !same(alias, want) {
			t.Errorf("n=%d: sum4F32AVX512 into its third source differs", n)
		}
		acc := append([]float32(nil), xs[4]...)
		for i := range want {
			want[i] = xs[4][i] + xs[0][i] + xs[1][i] + xs[2][i] + xs[3][i]
		}
		add4F32AVX512(&acc[0], &xs[0][0], &xs[1][0], &xs[2][0], &xs[3][0], n)
		if !same(acc, want) {
			t.Errorf("n=%d: add4F32AVX512 differs from the scalar loop", n)
		}
		sc := make([]float32, n)
		scaleF32AVX512(&sc[0], &xs[0][0], n, AvgScale(3))
		for i := range want {
			want[i] = xs[0][i] * AvgScale(3)
		}
		if !same(sc, want) {
			t.Errorf("n=%d: scaleF32AVX512 differs from the scalar loop", n)
		}
		if n > 1 { // the tail mask: nothing past n is written
			buf := make([]float32, n+16)
			for i := range buf {
				buf[i] = 7
			}
			sum4F32AVX512(&buf[0], &xs[0][0], &xs[1][0], &xs[2][0], &xs[3][0], n-1)
			sb := append([]float32(nil), buf...)
			scaleF32AVX512(&sb[0], &xs[0][0], n-1, 2)
			for i := n - 1; i < len(buf); i++ {
				if buf[i] != 7 || sb[i] != 7 {
					t.Fatalf("n=%d: element %d past the end written", n-1, i)
				}
			}
		}
	}
}
