package comm

import (
	"math"
	"testing"
	"time"
)

// crowdClock drives a Crowding with made-up clocks: each event at wall
// time t (ms since t0).
type crowdClock struct {
	c  *Crowding
	t0 time.Time
}

func ms(x float64) time.Duration { return time.Duration(x * float64(time.Millisecond)) }

func (k crowdClock) mark(t float64) Mark {
	now := k.t0.Add(ms(t))
	return Mark{wall: now, area: k.c.at(now, 1)}
}

// close ends the wait begun at m and returns its exposed part (ms), the
// whole wait being the span.
func (k crowdClock) close(m Mark, t float64) float64 {
	now := k.t0.Add(ms(t))
	wall := now.Sub(m.wall)
	area := k.c.at(now, -1)
	return float64(wall-crowdedPart(wall, area-m.area, wall)) / float64(time.Millisecond)
}

// A wait exposes its share of the idle cores: R ranks on C cores, W of
// them blocked, leave max(C − R + W, 0) cores idle, and each blocked rank
// exposes R/(C·W) of them.
func TestCrowdedIsTheIdleCores(t *testing.T) {
	if NewCrowding(2, 2) != nil || NewCrowding(1, 4) != nil || NewCrowding(3, 0) != nil {
		t.Fatal("ranks that do not outnumber the cores are measured")
	}
	for _, tc := range []struct {
		ranks, cores, blocked int     // blocked over the same 90 ms
		wantEach              float64 // ms each exposes
	}{
		{4, 2, 4, 90}, // nothing runs
		{4, 2, 3, 60}, // one core runs: the other, two shares, split in three
		{4, 2, 2, 0},  // the other two fill the cores
		{4, 2, 1, 0},
		{3, 2, 2, 67.5}, // one idle core of two, 3/2 shares, split in two
		{3, 2, 3, 90},
		{8, 2, 7, 90 * 8.0 / 14}, // one idle core: 4 shares among 7
	} {
		k := crowdClock{NewCrowding(tc.ranks, tc.cores), time.Unix(100, 0)}
		marks := make([]Mark, tc.blocked)
		for i := range marks {
			marks[i] = k.mark(0)
		}
		for i, m := range marks {
			if got := k.close(m, 90); math.Abs(got-tc.wantEach) > 1e-3 {
				t.Errorf("%d ranks on %d cores, %d blocked: wait %d exposes %.3f ms of 90, want %.3f", tc.ranks, tc.cores, tc.blocked, i, got, tc.wantEach)
			}
		}
	}
	var nilC *Crowding
	if nilC.Mark() != (Mark{}) || nilC.Crowded(Mark{}, time.Second) != 0 {
		t.Error("a nil Crowding measured something")
	}
}

// Overlapping waits of different lengths on 4 ranks and 2 cores: the
// exposed parts sum to the idle core time × R/C (the mean over the ranks
// to the idle time over C: what the waits cost the step). A measure of
// each wait by its own interval's mean count of blocked ranks books a
// fraction of it on this schedule.
func TestCrowdedSumsToTheIdleCores(t *testing.T) {
	k := crowdClock{NewCrowding(4, 2), time.Unix(100, 0)}
	// Blocked: a 0–20 ms, b 10–30, c 12–25, d 15–18. Idle cores: one
	// over 12–15 and 18–20 (three blocked), two over 15–18 (four).
	a := k.mark(0)
	b := k.mark(10)
	c := k.mark(12)
	d := k.mark(15)
	ed := k.close(d, 18)
	ea := k.close(a, 20)
	ec := k.close(c, 25)
	eb := k.close(b, 30)
	idle := 3*1.0 + 3*2 + 2*1
	if got, want := ea+eb+ec+ed, idle*4/2; math.Abs(got-want) > 1e-3 {
		t.Errorf("exposed %.3f + %.3f + %.3f + %.3f = %.3f ms, want the idle %.0f core-ms × R/C = %.3f", ea, eb, ec, ed, got, idle, want)
	}
	for _, e := range []float64{ea, eb, ec} {
		if want := 2.0/3*5 + 3; math.Abs(e-want) > 1e-3 {
			t.Errorf("a wait over the three- and four-blocked intervals exposes %.3f ms, want %.3f", e, want)
		}
	}
}

// The count of blocked ranks follows the live Marks.
func TestCrowdingCountsTheLiveMarks(t *testing.T) {
	live := NewCrowding(4, 2)
	a := live.Mark()
	b := live.Mark()
	live.Crowded(b, 0)
	live.mu.Lock()
	n := live.waiting
	live.mu.Unlock()
	if n != 1 {
		t.Errorf("after two waits, one closed: %d open", n)
	}
	live.Crowded(a, 0)
	if live.waiting != 0 {
		t.Errorf("all closed: %d open", live.waiting)
	}
}
