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
