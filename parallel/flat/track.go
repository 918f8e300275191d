package flat

import (
	"sync"
	"time"

	"trellis/comm"
)

// Tracker watches a rank's asynchronous collectives and accounts the time
// the rank's compute goroutine spends blocked on them: its exposed
// communication. A group's own Stats count the time its callers spend in
// Work.Wait; the watcher goroutines Tracker starts are not callers: they
// wait on the Work's completion channel where it has one (comm.Queue's
// Works do), so that an operation watched on a group the rank also waits
// on directly (the gradient norm's all-reduce on the tensor-parallel
// group) is counted once, in the tracker, and not again, overlapping the
// compute it ran beside, in the group's Wait and Skew.
type Tracker struct {
	mu                  sync.Mutex
	wait, skew, crowded time.Duration
}

// Op is one watched operation.
type Op struct {
	t    *Tracker
	done chan struct{}
	err  error
	end  time.Time // when the operation completed on its queue
	last time.Time // when the group's last member arrived at it (zero: not known)

	crowd *comm.Crowding // the work's queue's measure (nil: none)
}

// finishedAt and arrivedAt are implemented by the Works of comm.Queue.
type finishedAt interface{ FinishedAt() time.Time }
type arrivedAt interface{ ArrivedAt() time.Time }
type doneChan interface{ Done() <-chan struct{} }

// Watch starts following w. When w completes, then (if not nil) runs on the
// watcher goroutine — for releasing memory the operation read, never for
// arithmetic whose order matters — and the Op becomes Done.
func (t *Tracker) Watch(w comm.Work, then func()) *Op {
	o := &Op{t: t, done: make(chan struct{}), crowd: comm.CrowdingOf(w)}
	go func() {
		if d, ok := w.(doneChan); ok {
			<-d.Done() // then Wait returns at once, and is not accounted
		}
		o.err = w.Wait()
		o.end = time.Now()
		if f, ok := w.(finishedAt); ok && !f.FinishedAt().IsZero() {
			o.end = f.FinishedAt()
		}
		if a, ok := w.(arrivedAt); ok {
			o.last = a.ArrivedAt()
		}
		if then != nil {
			then()
		}
		close(o.done)
	}()
	return o
}

// Done reports, without blocking, whether the operation has completed.
func (o *Op) Done() bool {
	select {
	case <-o.done:
		return true
	default:
		return false
	}
}

// Wait blocks until the operation completes and returns its error; the
// time blocked until the operation completed on its queue is exposed
// communication (what follows — the watcher's release of memory, the wait
// for a core — is not communication, and is not in the queue's Busy time).
// Of it, the part the rank's share of shared cores ran its peers' work
// is Crowded (comm.Crowding), and the part before the group's last
// member arrived that left the cores idle is Skew: the wait for peers,
// not for the transfer (comm.Crowding.Parts).
func (o *Op) Wait() error {
	if o.Done() {
		return o.err
	}
	start := time.Now()
	mark := o.crowd.Mark()
	<-o.done
	blocked := time.Since(start)
	if d := o.end.Sub(start); d < blocked {
		blocked = max(d, 0)
	}
	var skew time.Duration
	if !o.last.IsZero() {
		skew = min(max(o.last.Sub(start), 0), blocked)
	}
	skew, crowded := o.crowd.Parts(mark, blocked, skew)
	o.t.mu.Lock()
	o.t.wait += blocked
	o.t.skew += skew
	o.t.crowded += crowded
	o.t.mu.Unlock()
	return o.err
}

// Exposed is the total time Wait has blocked.
func (t *Tracker) Exposed() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.wait
}

// Stats sums the groups' accounting (each group once) and replaces its Wait,
// Skew and Crowded with the tracker's: Busy is the total time the rank's
// collectives ran, Wait the part of it the rank did not hide, Skew the
// part of Wait before the last peer arrived.
func (t *Tracker) Stats(groups ...comm.Group) comm.Stats {
	var s comm.Stats
	seen := map[comm.Group]bool{}
	for _, g := range groups {
		if g == nil || seen[g] {
			continue
		}
		seen[g] = true
		s = s.Add(g.Stats())
	}
	t.mu.Lock()
	s.Wait, s.Skew, s.Crowded = t.wait, t.skew, t.crowded
	t.mu.Unlock()
	return s
}
