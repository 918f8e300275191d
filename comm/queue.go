package comm

import (
	"errors"
	"runtime"
	"sync"
	"time"
)

// Queue runs one group's operations in issue order on its own goroutine, the
// way a CUDA stream orders kernels, and accounts the time they take (Busy) and
// the time callers block on them (Wait). Backends build their Groups on it.
//
// A caller that waits for an operation the queue has not started, with
// nothing before it, runs the operation itself (see Wait): a synchronous
// collective then costs no hand-off to the queue's goroutine and back,
// which on busy cores means waiting for a core twice.
//
// After an operation fails, the queue is broken: every later operation fails
// at once with the same error, so a rank never waits on peers that have
// already given up.
type Queue struct {
	mu      sync.Mutex
	cond    *sync.Cond
	pending []*work
	running bool  // an operation is running (on the queue's goroutine or a waiter's)
	err     error // sticky
	closed  bool
	stats   Stats
	lastEnd time.Time // when the previous operation finished
	current *work     // the operation running (read and written only by the goroutine running it)
	done    chan struct{}

	// Point-to-point operations in flight (see Start) and since when the
	// count was last above zero.
	inflight  int
	busySince time.Time

	crowd *Crowding     // set before use (SetCrowding); nil: not measured
	poll  time.Duration // how long a Wait on a started operation polls before blocking (SetPoll)
}

// NewQueue starts a queue's goroutine; Close stops it.
func NewQueue() *Queue {
	q := &Queue{done: make(chan struct{})}
	q.cond = sync.NewCond(&q.mu)
	go q.loop()
	return q
}

type work struct {
	q         *Queue
	fn        func() error
	bytes     int64
	done      chan struct{}
	err       error
	submitted time.Time
	finished  time.Time // set before done is closed
	arrived   time.Time // when the last member arrived (Arrived; zero: not known)
	poll      time.Duration
}

// FinishedAt is when the operation completed on its queue (zero for a
// Work made by Done). Valid once Wait has returned.
func (w *work) FinishedAt() time.Time { return w.finished }

// Crowding is the measure of the queue the Work came from (nil: none),
// for waiters that account their own blocked time (parallel/flat's
// Tracker, a pipeline stage).
func (w *work) Crowding() *Crowding {
	if w.q == nil {
		return nil
	}
	return w.q.crowd
}

// ArrivedAt is when the last member of the group arrived at the operation
// (zero when the backend does not say). Valid once Wait has returned.
func (w *work) ArrivedAt() time.Time { return w.arrived }

// Done is closed when the operation completes (Wait then returns at
// once), for callers that wait with a deadline or test without blocking.
func (w *work) Done() <-chan struct{} { return w.done }

// Wait implements Work.
func (w *work) Wait() error {
	select {
	case <-w.done:
		return w.err
	default:
	}
	start := time.Now()
	var mark Mark
	if w.q != nil {
		mark = w.q.crowd.Mark()
	}
	if w.q != nil && w.q.claim(w) {
		w.q.run(w, nil)
	}
	if w.poll > 0 {
		Poll(w.done, w.poll)
	}
	<-w.done
	if w.q != nil {
		// Exposed is the time blocked until the operation ended, not until
		// this goroutine ran again (on busy cores that can be much later):
		// the wait lies inside the operation's Busy interval.
		blocked := time.Since(start)
		if !w.finished.IsZero() {
			blocked = min(blocked, max(w.finished.Sub(start), 0))
		}
		// The part of [start, start+blocked] before the last member
		// arrived was spent waiting for peers.
		var skew time.Duration
		if !w.arrived.IsZero() {
			skew = min(max(w.arrived.Sub(start), 0), blocked)
		}
		// Where ranks outnumber the cores, the part of it the rank's
		// share of them ran the others' work is the cores' (Crowding),
		// the wait for peers' included; the rest past the arrivals is
		// the transfer's.
		skew, crowded := w.q.crowd.Parts(mark, blocked, skew)
		w.q.mu.Lock()
		w.q.stats.Wait += blocked
		w.q.stats.Skew += skew
		w.q.stats.Crowded += crowded
		w.q.mu.Unlock()
	}
	return w.err
}

// Poll waits up to d for done to be closed, yielding the core to the
// caller's other goroutines between looks (runtime.Gosched), and reports
// whether it was: a waiter that keeps its core awake before it blocks
// (Queue.SetPoll, comm/local's Config.Poll). d ≤ 0 looks once.
func Poll(done <-chan struct{}, d time.Duration) bool {
	for start := time.Now(); ; runtime.Gosched() {
		select {
		case <-done:
			return true
		default:
		}
		if time.Since(start) >= d {
			return false
		}
	}
}

// Done returns a Work that has already finished with err (nil for success),
// for operations that need no communication.
func Done(err error) Work {
	w := &work{done: make(chan struct{}), err: err}
	close(w.done)
	return w
}

// Submit appends fn to the queue. bytes is the payload size for Stats. fn runs
// after every earlier operation has finished; its error becomes the Work's.
func (q *Queue) Submit(bytes int, fn func() error) Work {
	w := &work{q: q, fn: fn, bytes: int64(bytes), done: make(chan struct{}), submitted: time.Now()}
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.closed:
		w.err = ErrClosed
		close(w.done)
	case q.err != nil:
		w.err = q.err
		close(w.done)
	default:
		q.pending = append(q.pending, w)
		q.cond.Signal()
	}
	return w
}

func (q *Queue) loop() {
	defer close(q.done)
	for {
		q.mu.Lock()
		for q.running || (len(q.pending) == 0 && !q.closed) {
			q.cond.Wait()
		}
		if len(q.pending) == 0 {
			q.mu.Unlock()
			return
		}
		w := q.pending[0]
		q.pending[0] = nil
		q.pending = q.pending[1:]
		q.running = true
		err := q.err
		if q.closed {
			err = ErrClosed
		}
		q.mu.Unlock()
		q.run(w, err)
	}
}

// claim takes w off the queue for its waiter to run, if w is next and
// nothing runs: the order of the queue's operations is kept, and the
// queue's goroutine waits until run ends.
func (q *Queue) claim(w *work) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.running || q.closed || q.err != nil || len(q.pending) == 0 || q.pending[0] != w {
		return false
	}
	q.pending[0] = nil
	q.pending = q.pending[1:]
	q.running = true
	return true
}

// run runs w (unless err, the queue's state when w was taken, says it
// must fail), accounts it and completes it.
func (q *Queue) run(w *work, err error) {
	if err == nil {
		q.current = w
		err = w.fn()
		q.current = nil
	}
	// Busy counts the time the operation was in flight: from when it
	// could start (submitted, and the one before it finished) to its
	// end. Any caller's blocked time in Wait lies inside these
	// intervals, so exposed communication never exceeds the total.
	end := time.Now()
	begin := w.submitted
	if q.lastEnd.After(begin) {
		begin = q.lastEnd
	}

	q.mu.Lock()
	q.lastEnd = end
	q.stats.Busy += end.Sub(begin)
	q.stats.Bytes += w.bytes
	if err == nil {
		q.stats.Ops++
	} else if q.err == nil {
		q.err = err
	}
	q.running = false
	q.cond.Signal()
	q.mu.Unlock()
	w.err, w.finished = err, end
	close(w.done)
}

// Issued is when the running operation was submitted: when its caller
// issued it. Only the goroutine running the operation may call it.
func (q *Queue) Issued() time.Time {
	if q.current != nil {
		return q.current.submitted
	}
	return time.Time{}
}

// SetCrowding makes the queue measure how much of its waits went to the
// other ranks of the process (Stats.Crowded); call it before the first
// operation.
func (q *Queue) SetCrowding(c *Crowding) { q.crowd = c }

// SetPoll makes a Wait on an operation Start began (a Send or Recv) poll
// for its end up to d before it blocks (0: block at once). A blocked
// goroutine is woken by its peer's goroutine, which readies it on its own
// core and computes on; the waiter's idle core, asleep, takes longer to
// wake than a short compute step lasts (100–150 µs on a KVM vCPU, see
// docs/BENCHMARKS.md): a ring of receives between two ranks then runs the
// ranks in turn on one core. Polling keeps the waiter's core awake, so
// set it only where every rank has a core of its own. Set before use.
func (q *Queue) SetPoll(d time.Duration) { q.poll = d }

// Arrived records, from inside the running operation's function, when
// the last member of the group arrived at it, so that Stats can tell the
// wait for peers (Skew) from the wait for the transfer. Only the goroutine
// running the operation may call it.
func (q *Queue) Arrived(t time.Time) {
	if q.current != nil {
		q.current.arrived = t
	}
}

// Fail breaks the queue with err: pending and later operations fail with it.
// The operation running now is not interrupted; backends unblock it
// themselves (closing connections, cancelling waits).
func (q *Queue) Fail(err error) {
	q.mu.Lock()
	if q.err == nil {
		q.err = err
	}
	q.mu.Unlock()
}

// Err returns the error that broke the queue, if any.
func (q *Queue) Err() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.err
}

// Stats returns the queue's accounting.
func (q *Queue) Stats() Stats {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.stats
}

// Close fails pending operations with ErrClosed and stops the goroutine once
// the running operation returns.
func (q *Queue) Close() {
	q.mu.Lock()
	q.closed = true
	q.cond.Signal()
	q.mu.Unlock()
	<-q.done
}

// Start begins an operation that runs outside the queue's order (a Send or
// Recv): it returns the operation's Work and the function that finishes it
// with its outcome, which must be called exactly once. The operation is
// accounted in Stats like a queued one (Busy counts the time at least one
// started operation is in flight); its failure breaks the queue too. If the
// queue is already broken or closed, Start returns that error instead.
func (q *Queue) Start(bytes int) (Work, func(error), error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.closed:
		return nil, nil, ErrClosed
	case q.err != nil:
		return nil, nil, q.err
	}
	if q.inflight == 0 {
		q.busySince = time.Now()
	}
	q.inflight++
	w := &work{q: q, bytes: int64(bytes), done: make(chan struct{}), poll: q.poll}
	return w, func(err error) { q.finish(w, err) }, nil
}

// StartFrom is Start for an operation that learns when its peer arrived
// at it (a receive: when the matching send delivered its message): its
// finish takes that time too (zero: not known), and Wait counts the part
// of its wait before it as Skew, the wait for a peer still computing, as
// a collective's wait for its last member is.
func (q *Queue) StartFrom(bytes int) (Work, func(err error, arrived time.Time), error) {
	w, _, err := q.Start(bytes)
	if err != nil {
		return nil, nil, err
	}
	ww := w.(*work)
	return w, func(err error, arrived time.Time) {
		ww.arrived = arrived
		q.finish(ww, err)
	}, nil
}

// finish ends a started operation.
func (q *Queue) finish(w *work, err error) {
	end := time.Now()
	q.mu.Lock()
	q.inflight--
	if q.inflight == 0 {
		q.stats.Busy += end.Sub(q.busySince)
	}
	q.stats.Bytes += w.bytes
	if err == nil {
		q.stats.Ops++
	} else if q.err == nil && !errors.Is(err, ErrClosed) {
		q.err = err
	}
	q.mu.Unlock()
	w.err, w.finished = err, end
	close(w.done)
}
