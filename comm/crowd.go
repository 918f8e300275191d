package comm

import (
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Crowding tells how much of a rank's blocked time went to the other
// ranks of its process when more ranks than cores share the process's
// cores. R ranks on C < R cores each own a share s = C/R of them. Over a
// rank's blocked interval the process runs on r cores (its CPU time over
// the wall time, every goroutine's) while W ranks are blocked on average
// (this one included: the time-weighted count of the waits the measure
// follows); the R − W running ranks are entitled to (R − W)·s, and what
// they run beyond that came out of the blocked ranks' shares, equally:
//
//	crowded = clamp((r − (R − W)·s) / (W·s), 0, 1) · blocked
//
// That part of a wait is the rank waiting for the cores its peers hold,
// not for a transfer or a neighbour: the planner's compute term on shared
// cores (the work times R/C) counts it, and the engine books it there
// (train's step clock). The rest is idle cores, shared by the blocked
// ranks: W ranks blocked while one core of C lies idle book one core's
// worth of the wait between them, not W. The others' work includes what
// the collective itself runs on the cores (an in-process reduction), which
// a transport with engines of its own would not take from compute.
//
// Every Mark must be followed by one Crowded (the count of blocked ranks
// is the Marks not yet closed). A nil *Crowding (ranks that do not
// outnumber the cores, a backend whose ranks live in processes of their
// own) measures nothing.
type Crowding struct {
	ranks, share float64 // R and s (cores)

	mu      sync.Mutex
	waiting int           // Marks not yet closed by Crowded
	since   time.Time     // when waiting last changed
	area    time.Duration // ∫ waiting dt since the start
}

// NewCrowding is the measure for ranks in-process ranks sharing cores
// cores; nil when they do not outnumber them.
func NewCrowding(ranks, cores int) *Crowding {
	if cores < 1 || ranks <= cores {
		return nil
	}
	return &Crowding{ranks: float64(ranks), share: float64(cores) / float64(ranks)}
}

// Mark is where a blocked interval began: the wall clock, the process's
// CPU time and the integral of the blocked ranks' count.
type Mark struct {
	wall time.Time
	cpu  time.Duration
	area time.Duration
}

// step moves the integral to now and the count by d (c.mu held).
func (c *Crowding) step(now time.Time, d int) time.Duration {
	if !c.since.IsZero() {
		c.area += time.Duration(c.waiting) * now.Sub(c.since)
	}
	c.since = now
	c.waiting += d
	return c.area
}

// Mark reads the clocks at the start of a wait (the zero Mark for nil).
func (c *Crowding) Mark() Mark {
	if c == nil {
		return Mark{}
	}
	c.mu.Lock()
	now := time.Now()
	area := c.step(now, 1)
	c.mu.Unlock()
	return Mark{wall: now, cpu: processCPU(), area: area}
}

// Crowded closes the wait that began at m: the part of blocked (a span of
// it) that the rank's share of the cores ran the others' work, by the
// process's rate and the blocked ranks' mean count from m until now.
func (c *Crowding) Crowded(m Mark, blocked time.Duration) time.Duration {
	if c == nil || m.wall.IsZero() {
		return 0
	}
	cpu := processCPU()
	c.mu.Lock()
	now := time.Now()
	area := c.step(now, -1)
	c.mu.Unlock()
	if blocked <= 0 {
		return 0
	}
	return c.crowded(m, Mark{wall: now, cpu: cpu, area: area}, blocked)
}

// crowded is Crowded with the interval's end read at now.
func (c *Crowding) crowded(m, now Mark, blocked time.Duration) time.Duration {
	wall := now.wall.Sub(m.wall)
	if wall <= 0 {
		return 0
	}
	r := float64(now.cpu-m.cpu) / float64(wall)
	w := min(max(float64(now.area-m.area)/float64(wall), 1), c.ranks)
	f := min(max((r-(c.ranks-w)*c.share)/(w*c.share), 0), 1)
	return time.Duration(f * float64(blocked))
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

// processCPU is the CPU time the process has used, every thread's.
func processCPU() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
