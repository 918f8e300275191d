package comm

import (
	"sync"
	"time"
)

// Crowding tells how much of a rank's blocked time went to the other
// ranks of its process when more ranks than cores share the process's
// cores: R ranks on C < R cores. Where no core lies idle, a blocked rank
// is waiting for the cores its peers hold, not for a transfer or a
// neighbour: the planner's compute term on shared cores (the work times
// R/C) counts it, and the engine books it there (train's step clock).
// What the ranks' waits cost the step is the cores' idle time: a step of
// T on C cores is (the ranks' work + the idle core time)/C, so the
// exposed waits, averaged over the R ranks, are the idle core time over
// C, and summed over them idle·R/C. The measure keeps that sum exactly,
// as an integral over the intervals between the waits' starts and ends,
// in each of which the count W of blocked ranks is constant: the R − W
// running ranks hold a core each, so max(C − (R − W), 0) cores lie idle,
// shared equally among the blocked ranks:
//
//	I += dt · max(C − R + W, 0) · R/(C·W)   while W ≥ 1
//
// (at most dt: the share reaches 1 only when all R are blocked). A wait
// from a to b exposes I(b) − I(a) of its b − a; the rest of it is
// crowded. Four ranks on two cores: one or two blocked expose nothing
// (the others fill the cores), three expose two thirds each, four all.
//
// The count is of ranks, not of what the cores run: a running rank is
// taken to keep one core busy (the engine's in-process ranks run one
// kernel thread each when they outnumber the cores), and the
// collective's own copies, which run while their ranks are blocked, are
// part of the exposed wait (the transfer). The process's CPU clock cannot
// tell this instead: Linux advances the other threads' part of
// CLOCK_PROCESS_CPUTIME_ID only at scheduler ticks, so that over the
// 0.05–1 ms of a wait it reads about one core where two are busy (and
// the measure built on it booked dp=4,zero=3's exposed comm at twice the
// cores' idle time).
//
// Every Mark must be followed by one Crowded (the count of blocked ranks
// is the Marks not yet closed). A nil *Crowding (ranks that do not
// outnumber the cores, a backend whose ranks live in processes of their
// own) measures nothing.
type Crowding struct {
	ranks, cores float64 // R and C

	mu      sync.Mutex
	waiting int           // Marks not yet closed by Crowded: W
	since   time.Time     // when waiting last changed
	idle    time.Duration // I: ∫ a blocked rank's share of the idle cores
}

// NewCrowding is the measure for ranks in-process ranks sharing cores
// cores; nil when they do not outnumber them.
func NewCrowding(ranks, cores int) *Crowding {
	if cores < 1 || ranks <= cores {
		return nil
	}
	return &Crowding{ranks: float64(ranks), cores: float64(cores)}
}

// Mark is where a blocked interval began: the wall clock and the idle
// share's integral I.
type Mark struct {
	wall time.Time
	area time.Duration
}

// at moves the integral to now and the count by d (c.mu held) and
// returns it.
func (c *Crowding) at(now time.Time, d int) time.Duration {
	if !c.since.IsZero() && c.waiting > 0 {
		w := float64(c.waiting)
		share := min(max(c.cores-c.ranks+w, 0)*c.ranks/(c.cores*w), 1)
		c.idle += time.Duration(share * float64(now.Sub(c.since)))
	}
	c.since = now
	c.waiting += d
	return c.idle
}

// Mark reads the clock at the start of a wait (the zero Mark for nil).
func (c *Crowding) Mark() Mark {
	if c == nil {
		return Mark{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	return Mark{wall: now, area: c.at(now, 1)}
}

// Crowded closes the wait that began at m and returns the part of span
// (a part of the wait, or all of it) that the rank's share of the cores
// ran the others' work: span × (1 − exposed/wall), the wait's exposed
// share I(now) − I(m) spread evenly over it.
func (c *Crowding) Crowded(m Mark, span time.Duration) time.Duration {
	if c == nil || m.wall.IsZero() {
		return 0
	}
	c.mu.Lock()
	now := time.Now()
	area := c.at(now, -1)
	c.mu.Unlock()
	return crowdedPart(now.Sub(m.wall), area-m.area, span)
}

// Parts closes the wait that began at m, blocked long, whose first skew
// waited for the group's last member, and splits it: crowded is the part
// of the whole wait that the rank's share of the cores ran the other
// ranks' work (Crowded over blocked), idleSkew the wait for peers less
// its crowded part — what of it left the cores idle (the exposed share is
// spread evenly over the wait, so the skew's crowded part is its
// skew/blocked of crowded). The two are disjoint parts of blocked, and
// add up to skew + the crowded part of blocked − skew: a wait for a peer
// on cores that other ranks keep busy is a wait for the cores, whoever
// is late. A nil *Crowding returns skew and 0.
func (c *Crowding) Parts(m Mark, blocked, skew time.Duration) (idleSkew, crowded time.Duration) {
	crowded = c.Crowded(m, blocked)
	if blocked <= 0 {
		return skew, crowded
	}
	return skew - min(time.Duration(float64(crowded)*float64(skew)/float64(blocked)), skew), crowded
}

// crowdedPart is the crowded part of span, a part of a wait of wall that
// exposed exposed of it.
func crowdedPart(wall, exposed, span time.Duration) time.Duration {
	if wall <= 0 || span <= 0 {
		return 0
	}
	f := 1 - min(float64(exposed)/float64(wall), 1)
	return min(time.Duration(f*float64(span)), span)
}

// CrowdingOf is the measure of the queue w came from (nil for a Work
// that is not comm.Queue's, or a queue without one), for waiters that
// account their own blocked time.
func CrowdingOf(w Work) *Crowding {
	if c, ok := w.(interface{ Crowding() *Crowding }); ok {
		return c.Crowding()
	}
	return nil
}
