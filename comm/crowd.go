package comm

import (
	"time"

	"golang.org/x/sys/unix"
)

// Crowding tells how much of a rank's blocked time went to the other
// ranks of its process when more ranks than cores share the process's
// cores. R ranks on C < R cores each own a share s = C/R of them; the
// others are entitled to e = C − s. While a rank is blocked, the process
// runs on r cores (its CPU time over the wall time, every goroutine's),
// all of it the others' work; what they run beyond their own share came
// out of the blocked rank's:
//
//	crowded = clamp((r − e)/s, 0, 1) · blocked
//
// That part of a wait is the rank waiting for the cores its peers hold,
// not for a transfer or a neighbour: the planner's compute term on shared
// cores (the work times R/C) counts it, and the engine books it there
// (train's step clock). A rank blocked while the others fill only their
// own share (a pipeline's fill on cores of its own) is not crowded. The
// others' work includes what the collective itself runs on the cores (an
// in-process reduction), which a transport with engines of its own would
// not take from compute.
//
// A nil *Crowding (ranks that do not outnumber the cores, a backend whose
// ranks live in processes of their own) measures nothing.
type Crowding struct {
	share, others float64 // cores: s and e
}

// NewCrowding is the measure for ranks in-process ranks sharing cores
// cores; nil when they do not outnumber them.
func NewCrowding(ranks, cores int) *Crowding {
	if cores < 1 || ranks <= cores {
		return nil
	}
	s := float64(cores) / float64(ranks)
	return &Crowding{share: s, others: float64(cores) - s}
}

// Mark is where a blocked interval began: the wall clock and the
// process's CPU time.
type Mark struct {
	wall time.Time
	cpu  time.Duration
}

// Mark reads the clocks at the start of a wait (the zero Mark for nil).
func (c *Crowding) Mark() Mark {
	if c == nil {
		return Mark{}
	}
	return Mark{wall: time.Now(), cpu: processCPU()}
}

// Crowded is the part of blocked (a span of the wait that began at m)
// that the rank's share of the cores ran the others' work, by the rate
// the process ran at from m until now.
func (c *Crowding) Crowded(m Mark, blocked time.Duration) time.Duration {
	if c == nil || m.wall.IsZero() || blocked <= 0 {
		return 0
	}
	return c.crowded(m, Mark{wall: time.Now(), cpu: processCPU()}, blocked)
}

// crowded is Crowded with the interval's end read at now.
func (c *Crowding) crowded(m, now Mark, blocked time.Duration) time.Duration {
	wall := now.wall.Sub(m.wall)
	if wall <= 0 {
		return 0
	}
	r := float64(now.cpu-m.cpu) / float64(wall)
	f := min(max((r-c.others)/c.share, 0), 1)
	return time.Duration(f * float64(blocked))
}

// CrowdingOf is g's measure (nil when its backend has none).
func CrowdingOf(g Group) *Crowding {
	if c, ok := g.(interface{ Crowding() *Crowding }); ok {
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
