package ops

import (
	"math"
	"testing"
)

func TestExp32(t *testing.T) {
	var worst float64
	for x := -87.0; x <= 88.0; x += 0.001237 {
		got := float64(exp32(float32(x)))
		want := math.Exp(float64(float32(x)))
		if r := math.Abs(got-want) / want; r > worst {
			worst = r
		}
	}
	if worst > 4e-7 {
		t.Errorf("exp32 max relative error %.3g, want <= 4e-7", worst)
	}
	edge := []struct{ x, want float32 }{{-100, 0}, {0, 1}, {float32(math.Inf(-1)), 0}}
	for _, e := range edge {
		if got := exp32(e.x); got != e.want {
			t.Errorf("exp32(%v) = %v, want %v", e.x, got, e.want)
		}
	}
	if !math.IsInf(float64(exp32(100)), 1) || !math.IsNaN(float64(exp32(float32(math.NaN())))) {
		t.Error("exp32 overflow/NaN handling")
	}
}

func TestTanh32(t *testing.T) {
	var worst float64
	for x := -12.0; x <= 12.0; x += 0.000731 {
		got := float64(tanh32(float32(x)))
		want := math.Tanh(float64(float32(x)))
		if e := math.Abs(got - want); e > worst {
			worst = e
		}
	}
	if worst > 6e-7 {
		t.Errorf("tanh32 max absolute error %.3g, want <= 6e-7", worst)
	}
}

// TestLog32 holds log32 within 2 ulp of math.Log over [2^-126, 2^40]
// (the flash forward takes it of row sums >= 1) and checks the edges it
// hands to math.Log.
func TestLog32(t *testing.T) {
	worst := 0.0
	for x := float32(0x1p-126); x < 0x1p40; x *= 1.00037 {
		got, want := log32(x), math.Log(float64(x))
		ulp := math.Abs(float64(math.Nextafter32(float32(want), float32(math.Inf(1)))) - float64(float32(want)))
		if want == 0 {
			ulp = 0x1p-149
		}
		worst = max(worst, math.Abs(float64(got)-want)/ulp)
	}
	if worst > 2 {
		t.Errorf("log32 max error %.3g ulp, want <= 2", worst)
	}
	if log32(1) != 0 || !math.IsInf(float64(log32(0)), -1) || !math.IsNaN(float64(log32(-1))) || !math.IsInf(float64(log32(float32(math.Inf(1)))), 1) {
		t.Error("log32 edges: want log 1 = 0, log 0 = -Inf, log -1 = NaN, log +Inf = +Inf")
	}
	t.Logf("log32 max error %.3g ulp", worst)
}
