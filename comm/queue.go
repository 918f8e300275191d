package comm

import (
	"sync"
	"time"
)

// Queue runs one group's operations in issue order on its own goroutine, the
// way a CUDA stream orders kernels, and accounts the time they take (Busy) and
// the time callers block on them (Wait). Backends build their Groups on it.
//
// After an operation fails, the queue is broken: every later operation fails
// at once with the same error, so a rank never waits on peers that have
// already given up.
type Queue struct {
	mu      sync.Mutex
	cond    *sync.Cond
	pending []*work
	err     error // sticky
	closed  bool
	stats   Stats
	lastEnd time.Time // when the previous operation finished
	done    chan struct{}
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
}

// FinishedAt is when the operation completed on its queue (zero for a
// Work made by Done). Valid once Wait has returned.
func (w *work) FinishedAt() time.Time { return w.finished }

// Wait implements Work.
func (w *work) Wait() error {
	select {
	case <-w.done:
		return w.err
	default:
	}
	start := time.Now()
	<-w.done
	if w.q != nil {
		w.q.mu.Lock()
		w.q.stats.Wait += time.Since(start)
		w.q.mu.Unlock()
	}
	return w.err
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
		for len(q.pending) == 0 && !q.closed {
			q.cond.Wait()
		}
		if len(q.pending) == 0 {
			q.mu.Unlock()
			return
		}
		w := q.pending[0]
		q.pending[0] = nil
		q.pending = q.pending[1:]
		err := q.err
		if q.closed {
			err = ErrClosed
		}
		q.mu.Unlock()

		if err == nil {
			err = w.fn()
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
		q.mu.Unlock()
		w.err, w.finished = err, end
		close(w.done)
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
