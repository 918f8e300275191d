package checked

import (
	"math"
	"math/big"
	"testing"
)

// TestMulAgainstBig compares Mul and Add with exact big-integer arithmetic
// on the edges of int64.
func TestMulAgainstBig(t *testing.T) {
	vals := []int64{0, 1, -1, 2, -2, 3, 1 << 31, -(1 << 31), 1 << 32, 3037000499, 3037000500,
		1 << 62, -(1 << 62), math.MaxInt64, math.MinInt64, math.MaxInt64 / 2, math.MinInt64 / 2, 4294967296}
	lo, hi := big.NewInt(math.MinInt64), big.NewInt(math.MaxInt64)
	fits := func(z *big.Int) bool { return z.Cmp(lo) >= 0 && z.Cmp(hi) <= 0 }
	for _, a := range vals {
		for _, b := range vals {
			want := new(big.Int).Mul(big.NewInt(a), big.NewInt(b))
			got, ok := Mul(a, b)
			if ok != fits(want) || (ok && got != want.Int64()) {
				t.Errorf("Mul(%d, %d) = %d, %v; want %v (fits %v)", a, b, got, ok, want, fits(want))
			}
			wantS := new(big.Int).Add(big.NewInt(a), big.NewInt(b))
			gotS, okS := Add(a, b)
			if okS != fits(wantS) || (okS && gotS != wantS.Int64()) {
				t.Errorf("Add(%d, %d) = %d, %v; want %v", a, b, gotS, okS, wantS)
			}
		}
	}
}

func TestProduct(t *testing.T) {
	for _, c := range []struct {
		in   []int64
		want int64
		ok   bool
	}{
		{nil, 1, true},
		{[]int64{4294967296, 4294967296}, 0, false}, // bench matmul's m·k, which used to wrap to 0
		{[]int64{1 << 62, 1 << 62, 0}, 0, true},
		{[]int64{1024, 768, 3072}, 1024 * 768 * 3072, true},
		{[]int64{1 << 41, 1 << 22}, 0, false},
	} {
		got, ok := Product(c.in...)
		if got != c.want || ok != c.ok {
			t.Errorf("Product(%v) = %d, %v; want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
	if _, ok := Ints(1<<31, 1<<31, 4); ok {
		t.Error("Ints(2^31, 2^31, 4) = 2^64 reported as fitting")
	}
	if p, ok := Ints(1<<31, 1<<31); !ok || p != 1<<62 {
		t.Errorf("Ints(2^31, 2^31) = %d, %v; want 2^62", p, ok)
	}
}
