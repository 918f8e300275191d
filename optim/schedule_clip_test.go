package optim

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestScheduleValues(t *testing.T) {
	s := Schedule{Warmup: 4, Steps: 14, LR: 1e-3, MinLR: 1e-4}
	cases := []struct {
		step int
		want float64
	}{
		{-1, 2.5e-4}, // clamped to step 0
		{0, 2.5e-4},  // LR·1/4
		{1, 5e-4},
		{3, 1e-3}, // last warmup update reaches the peak
		{4, 1e-3}, // cosine starts at the peak
		{9, 1e-4 + 0.5*(1+math.Cos(math.Pi*0.5))*9e-4},
		{13, 1e-4 + 0.5*(1+math.Cos(math.Pi*0.9))*9e-4},
		{14, 1e-4},
		{1000, 1e-4},
	}
	for _, tc := range cases {
		if got := s.At(tc.step); math.Abs(got-tc.want) > 1e-15 {
			t.Errorf("LR(%d) = %.17g, want %.17g", tc.step, got, tc.want)
		}
	}
	// No warmup: the first update uses the peak rate.
	if got := (Schedule{Steps: 10, LR: 2}).At(0); got != 2 {
		t.Errorf("no warmup: LR(0) = %v, want 2", got)
	}
	// All warmup.
	if got := (Schedule{Warmup: 5, Steps: 5, LR: 1}).At(4); got != 1 {
		t.Errorf("warmup=steps: LR(4) = %v, want 1", got)
	}
}

func TestScheduleMonotoneAfterWarmup(t *testing.T) {
	s := Schedule{Warmup: 10, Steps: 200, LR: 6e-4, MinLR: 6e-5}
	prev := math.Inf(1)
	for step := s.Warmup; step < s.Steps+5; step++ {
		lr := s.At(step)
		if lr > prev || lr < s.MinLR {
			t.Fatalf("LR(%d) = %g after %g: must not rise nor fall below min_lr", step, lr, prev)
		}
		prev = lr
	}
}

func TestScheduleValidate(t *testing.T) {
	cases := []struct {
		s    Schedule
		want string
	}{
		{Schedule{Warmup: 0, Steps: 1, LR: 1}, ""},
		{Schedule{Steps: 0, LR: 1}, "steps=0"},
		{Schedule{Warmup: 5, Steps: 4, LR: 1}, "warmup=5"},
		{Schedule{Warmup: -1, Steps: 4, LR: 1}, "warmup=-1"},
		{Schedule{Steps: 4, LR: 0}, "lr=0"},
		{Schedule{Steps: 4, LR: math.Inf(1)}, "lr=+Inf"},
		{Schedule{Steps: 4, LR: 1, MinLR: 2}, "min_lr=2"},
		{Schedule{Steps: 4, LR: 1, MinLR: -1}, "min_lr=-1"},
	}
	for _, tc := range cases {
		err := tc.s.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%+v: unexpected %v", tc.s, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one containing %q", tc.s, err, tc.want)
		}
	}
}

func TestGlobalNormAgainstFloat64(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	for _, sizes := range [][]int{{0}, {1}, {3, 5}, {1000, 7, 4097}} {
		var xs [][]float32
		var ref float64
		for _, n := range sizes {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(r.NormFloat64())
				ref += float64(x[i]) * float64(x[i])
			}
			xs = append(xs, x)
		}
		if got := SumSquares(xs...); math.Abs(got-ref) > 1e-12*max(1, ref) {
			t.Errorf("sizes %v: SumSquares = %.17g, want %.17g", sizes, got, ref)
		}
		if got := GlobalNorm(xs...); math.Abs(got-math.Sqrt(ref)) > 1e-12*max(1, ref) {
			t.Errorf("sizes %v: GlobalNorm = %.17g, want %.17g", sizes, got, math.Sqrt(ref))
		}
	}
	// 3-4-12 triangle: ‖(3,4,12)‖ = 13, split over shards.
	if got := GlobalNorm([]float32{3}, []float32{4, 12}); got != 13 {
		t.Errorf("GlobalNorm = %v, want 13", got)
	}
	if got := GlobalNorm([]float32{1, float32(math.Inf(1))}); !math.IsInf(got, 1) {
		t.Errorf("GlobalNorm with Inf = %v, want +Inf", got)
	}
}

func TestClipScale(t *testing.T) {
	cases := []struct{ norm, max, want float64 }{
		{0.5, 1, 1},
		{2, 1, 1 / (2 + 1e-6)},
		{100, 0, 1}, // disabled
		{100, -1, 1},
	}
	for _, tc := range cases {
		if got := ClipScale(tc.norm, tc.max); got != tc.want {
			t.Errorf("ClipScale(%v, %v) = %v, want %v", tc.norm, tc.max, got, tc.want)
		}
	}
	if got := ClipScale(math.NaN(), 1); !math.IsNaN(got) {
		t.Errorf("ClipScale(NaN) = %v, want NaN so the caller notices", got)
	}
}
