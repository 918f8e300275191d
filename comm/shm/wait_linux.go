package shm

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"trellis/comm"
)

// Kinds of break record.
const (
	kindTimeout = 1 + iota
	kindDied
	kindClosed
	kindBufferFull
	kindArgs
)

// fail breaks the group for every member: the first caller writes the
// break record (what went wrong, the member to blame, the operation) into
// the segment and wakes every sleeper; every member's waits then return
// the error the record describes. It returns that error (the first
// record's, if another member broke the group first).
func (g *group) fail(kind uint32, blame int, op, why string) error {
	return g.record(kind, g.worldRank(blame), op, why)
}

// record writes the break record blaming world rank rank, unless the
// group is already broken, and returns the record's error.
func (g *group) record(kind uint32, rank int, op, why string) error {
	m := g.seg.m
	if m.u32(hBroken).CompareAndSwap(0, 1) {
		m.u32(hKind).Store(kind)
		m.u32(hBlame).Store(uint32(rank))
		opb, whyb := []byte(op), []byte(why)
		opb, whyb = opb[:min(len(opb), maxOp)], whyb[:min(len(whyb), maxWhy)]
		copy(m[hOp:], opb)
		copy(m[hWhy:], whyb)
		m.u32(hOpLen).Store(uint32(len(opb)))
		m.u32(hWhyLen).Store(uint32(len(whyb)))
		m.u32(hBroken).Store(2)
		g.wakeEveryone()
	}
	err := g.broken()
	g.q.Fail(err)
	return err
}

// wakeEveryone wakes whoever may sleep on one of this group's words.
func (g *group) wakeEveryone() {
	l, m := g.l(), g.seg.m
	for q := range g.ranks {
		wakeAll(m.u32(l.member(q) + mCounter))
		wakeAll(g.w.seg.m.u32(g.w.seg.l.member(g.ranks[q]) + mBell))
		for d := range g.ranks {
			if d != q {
				wakeAll(m.u32(l.ringOf(q, d) + rTailEv))
			}
		}
	}
}

// broken returns the error of the group's break record, nil while it is
// healthy.
func (g *group) broken() error {
	m := g.seg.m
	switch m.u32(hBroken).Load() {
	case 0:
		return nil
	case 1: // being written: it takes nanoseconds
		for m.u32(hBroken).Load() == 1 {
			runtime.Gosched()
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.failed != nil {
		return g.failed
	}
	kind, rank := m.u32(hKind).Load(), int(int32(m.u32(hBlame).Load()))
	op := string(m[hOp : hOp+int(m.u32(hOpLen).Load())])
	why := string(m[hWhy : hWhy+int(m.u32(hWhyLen).Load())])
	var cause error
	switch kind {
	case kindTimeout:
		cause = fmt.Errorf("%w: %s", comm.ErrTimeout, why)
	case kindClosed:
		cause = fmt.Errorf("%w: %s", comm.ErrClosed, why)
	case kindBufferFull:
		cause = fmt.Errorf("%w: %s", comm.ErrBufferFull, why)
	case kindArgs:
		g.failed = fmt.Errorf("shm: %s: %w: %s", op, comm.ErrArgs, why)
		return g.failed
	default:
		cause = errors.New(why)
	}
	g.failed = &comm.PeerError{Rank: rank, Op: op, Err: cause}
	return g.failed
}

// await returns once ready() holds. While it does not, it spins (yielding
// to this process's other goroutines) for the world's Spin, then sleeps on
// the futex word e, watching the break record, the liveness of member q
// (whose progress it waits for: blamed if it died, or if it stays silent
// past the Timeout) and the deadline. A condition that already holds wins
// over a break: a peer that closed after publishing what this member needs
// is not waited for.
func (g *group) await(e event, q int, op string, ready func() bool) error {
	if ready() {
		return nil
	}
	start := time.Now()
	local := g.w.pids[g.ranks[q]] == g.w.pid
	spin := time.Duration(g.w.spin.Load())
	if local {
		spin = time.Millisecond // a goroutine of this process: it needs our core
	}
	for i := 1; ; i++ {
		if ready() {
			if !local {
				g.w.spun(true)
			}
			return nil
		}
		if i%64 == 0 {
			runtime.Gosched()
			if time.Since(start) > spin {
				break
			}
		}
	}
	if !local {
		g.w.spun(false)
	}
	timeout := g.w.cfg.Timeout
	deadline := start.Add(timeout)
	var check time.Time
	for {
		seen := e.v.Load()
		if ready() {
			return nil
		}
		if err := g.broken(); err != nil {
			return err
		}
		now := time.Now()
		if now.After(check) {
			if err := g.w.alive(g.ranks[q]); err != nil {
				return g.fail(kindDied, q, op, err.Error())
			}
			check = now.Add(20 * time.Millisecond)
		}
		if now.After(deadline) {
			return g.fail(kindTimeout, q, op, fmt.Sprintf("waited %v for world rank %d", timeout, g.worldRank(q)))
		}
		e.zz.Add(1)
		if e.v.Load() == seen && !ready() {
			sleepOn(e.v, seen, min(10*time.Millisecond, time.Until(deadline)))
		}
		e.zz.Add(^uint32(0))
	}
}

// spun adapts how long waits spin before sleeping: twice as long after a
// spin that ended in time, half as long after one that did not, within
// [1 µs, Config.Spin]. Where peers are often descheduled (more ranks than
// cores, other work on the host) spinning only takes the core a peer
// could run on, and the budget shrinks to almost nothing; where they run
// alongside, it grows back to catch their next step without a futex
// round trip.
func (w *world) spun(inTime bool) {
	b := w.spin.Load()
	if inTime {
		w.spin.Store(min(2*b, int64(w.cfg.Spin)))
	} else {
		w.spin.Store(max(b/2, int64(time.Microsecond)))
	}
}

// counter is member q's progress counter.
func (g *group) counter(q int) event { return g.seg.m.event(g.l().member(q) + mCounter) }

// reached reports whether member q has published step s (serial
// arithmetic on the 32-bit futex word: members are never 2³¹ steps apart).
func (g *group) reached(q int, s uint64) bool {
	return int32(g.counter(q).v.Load()-uint32(s)) >= 0
}

// awaitStep waits until member q has published step s.
func (g *group) awaitStep(q int, s uint64, op string) error {
	return g.await(g.counter(q), q, op, func() bool { return g.reached(q, s) })
}

// Abort breaks the group for every member with err, as if this member had
// found it: a group built on this one (comm/hier) calls it when another
// transport failed, so that members waiting here on this member stop
// waiting, with the same error (a *comm.PeerError keeps the rank it names).
func (g *group) Abort(err error) {
	if err == nil {
		return
	}
	kind, rank, op := uint32(kindDied), g.worldRank(g.me), "abort"
	var pe *comm.PeerError
	if errors.As(err, &pe) {
		rank, op = pe.Rank, pe.Op
		err = pe.Err
	}
	switch {
	case errors.Is(err, comm.ErrTimeout):
		kind = kindTimeout
	case errors.Is(err, comm.ErrClosed):
		kind = kindClosed
	case errors.Is(err, comm.ErrBufferFull):
		kind = kindBufferFull
	case errors.Is(err, comm.ErrArgs):
		kind = kindArgs
	}
	g.record(kind, rank, op, err.Error())
}
