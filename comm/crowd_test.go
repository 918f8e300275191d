package comm

import (
	"testing"
	"time"
)

// The crowded part of a wait is clamp((r − e)/s, 0, 1) of it: 4 ranks on
// 2 cores own half a core each (s = 0.5, e = 1.5).
func TestCrowdedIsTheOthersExcess(t *testing.T) {
	if NewCrowding(2, 2) != nil || NewCrowding(1, 4) != nil || NewCrowding(3, 0) != nil {
		t.Fatal("ranks that do not outnumber the cores are measured")
	}
	c := NewCrowding(4, 2)
	t0 := time.Unix(100, 0)
	m := Mark{wall: t0, cpu: 10 * time.Second, area: time.Second}
	for _, tc := range []struct {
		rate float64 // cores the process ran on
		want time.Duration
	}{
		{0, 0},      // everyone idle: a real wait
		{1.5, 0},    // the others on their own share
		{1.75, 20},  // half the rank's share went to them
		{2, 40},     // all of it
		{2.5, 40},   // clamped
		{1.625, 10}, // a quarter
	} {
		wall := 100 * time.Millisecond
		now := Mark{wall: t0.Add(wall), cpu: m.cpu + time.Duration(tc.rate*float64(wall)), area: m.area + wall}
		if got := c.crowded(m, now, 40*time.Millisecond); got != tc.want*time.Millisecond {
			t.Errorf("rate %.3f cores: crowded %v of 40ms, want %vms", tc.rate, got, tc.want)
		}
	}
	// Three ranks on two cores: s = 2/3, e = 4/3.
	c3 := NewCrowding(3, 2)
	now := Mark{wall: t0.Add(time.Second), cpu: m.cpu + 2*time.Second, area: m.area + time.Second}
	if got := c3.crowded(m, now, 30*time.Millisecond); got < 30*time.Millisecond-time.Microsecond || got > 30*time.Millisecond {
		t.Errorf("3 ranks, the cores full: %v, want the whole 30ms", got)
	}
	// Three of four ranks blocked while one core of two runs: the idle
	// core is two shares, split among the three: a third of each wait is
	// the running rank's second share.
	wall := 90 * time.Millisecond
	three := Mark{wall: t0.Add(wall), cpu: m.cpu + wall, area: m.area + 3*wall}
	if got := c.crowded(m, three, 90*time.Millisecond); got < 30*time.Millisecond-time.Microsecond || got > 30*time.Millisecond+time.Microsecond {
		t.Errorf("three blocked, one core running: crowded %v of 90ms, want 30ms", got)
	}
	// The mean count follows the Marks: two overlapping waits.
	live := NewCrowding(4, 2)
	a := live.Mark()
	time.Sleep(10 * time.Millisecond)
	b := live.Mark()
	time.Sleep(10 * time.Millisecond)
	live.Crowded(b, 0)
	live.mu.Lock()
	mean := float64(live.step(time.Now(), 0)-a.area) / float64(time.Since(a.wall))
	n := live.waiting
	live.mu.Unlock()
	if n != 1 || mean < 1.3 || mean > 1.7 {
		t.Errorf("after two overlapping waits, one closed: %d open, mean count %.2f since the first (want 1 and about 1.5)", n, mean)
	}
	live.Crowded(a, 0)
	var nilC *Crowding
	if nilC.Mark() != (Mark{}) || nilC.Crowded(Mark{}, time.Second) != 0 {
		t.Error("a nil Crowding measured something")
	}
}

// The process's CPU clock advances with the work it does.
func TestProcessCPUAdvances(t *testing.T) {
	c0 := processCPU()
	x := 1.0
	for end := time.Now().Add(20 * time.Millisecond); time.Now().Before(end); {
		x = x*1.0000001 + 1e-9
	}
	if d := processCPU() - c0; d < 5*time.Millisecond {
		t.Errorf("20ms of spinning advanced the process's CPU clock by %v (x=%g)", d, x)
	}
}
