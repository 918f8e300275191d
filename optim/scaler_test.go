package optim

import "testing"

// TestLossScaler: an overflow halves the scale and restarts the window; a
// window of clean steps doubles it; the scale never drops below 1.
func TestLossScaler(t *testing.T) {
	s, err := NewLossScaler(8, 3)
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		overflow bool
		scale    float64
		clean    int
	}{
		{false, 8, 1}, {false, 8, 2}, {true, 4, 0}, {false, 4, 1}, {false, 4, 2}, {false, 8, 0},
		{true, 4, 0}, {true, 2, 0}, {true, 1, 0}, {true, 1, 0},
	} {
		s.Update(tc.overflow)
		if s.Scale != tc.scale || s.Clean != tc.clean {
			t.Fatalf("update %d (overflow %v): scale %g clean %d, want %g %d", i, tc.overflow, s.Scale, s.Clean, tc.scale, tc.clean)
		}
	}
	if s.Skipped != 5 {
		t.Errorf("skipped %d, want 5", s.Skipped)
	}
	for _, bad := range []struct {
		scale  float64
		window int
	}{{0.5, 1}, {8, 0}} {
		if _, err := NewLossScaler(bad.scale, bad.window); err == nil {
			t.Errorf("NewLossScaler(%g, %d) accepted", bad.scale, bad.window)
		}
	}
}
