package pp

import (
	"time"

	"trellis/comm"
	"trellis/trace"
)

// watched is a Work whose completion is observable without blocking (for
// reusing the buffers of finished sends) and, when tracing, is recorded on
// the comm lane from issue to completion. Wait waits on the transfer
// itself: a rank blocked on a transfer resumes the moment it completes.
//
// comm's Works (every backend's: they come from comm.Queue) signal their
// completion on a channel and say when it happened, so the stage observes
// them itself — in Wait, done and drain, which every transfer reaches —
// and records the span then, ending at the completion time. A transfer
// costs no goroutine: with every core running a rank, a goroutine per
// message means a wake-up and a hand-off per message, taken from the
// ranks' compute. Other Works (a Link of a test's making) get a watcher
// goroutine that waits and signals.
type watched struct {
	w      comm.Work
	ch     <-chan struct{} // closed at completion
	err    error           // the watcher goroutine's result (own)
	own    bool            // a watcher goroutine signals ch
	span   func(end time.Time)
	traced bool
}

// completion is implemented by comm's Works: closed when the operation
// completes, and when that was.
type completion interface {
	Done() <-chan struct{}
	FinishedAt() time.Time
}

// settle blocks until the transfer completes without entering its Wait
// (the stage accounts the wait, its crowded part included, itself: a
// second Mark of one rank's wait would count it twice among the ranks
// blocked) and returns its error.
func (w *watched) settle() error {
	if !w.own && w.ch != nil {
		<-w.ch
	}
	return w.Wait() // done: returns at once
}

// Wait blocks until the transfer completes.
func (w *watched) Wait() error {
	err := w.w.Wait()
	w.observe()
	return err
}

// done says, without blocking, whether the transfer has completed.
func (w *watched) done() bool {
	select {
	case <-w.ch:
		w.observe()
		return true
	default:
		return false
	}
}

// result is a completed transfer's error.
func (w *watched) result() error {
	if w.own {
		return w.err
	}
	return w.w.Wait() // completed: returns at once
}

// observe records the span of a completed transfer, once (the stage's
// goroutine only: a watched Work is not shared).
func (w *watched) observe() {
	if w.own || w.traced || w.span == nil {
		return
	}
	w.traced = true
	end := time.Now()
	if c, ok := w.w.(completion); ok && !c.FinishedAt().IsZero() {
		end = c.FinishedAt()
	}
	w.span(end)
}

// watch starts following w, a transfer of action a (the trace's label).
func (s *Stage) watch(w comm.Work, what string, a Action) *watched {
	ww := &watched{w: w}
	if tr := s.cfg.Trace; tr != nil {
		t0 := tr.Now()
		ww.span = func(end time.Time) { tr.SpanTo(trace.Comm, what+" "+a.String(), t0, end, "peer", a.Peer) }
	}
	if c, ok := w.(completion); ok {
		ww.ch = c.Done()
		return ww
	}
	ch := make(chan struct{})
	ww.ch, ww.own = ch, true
	go func() {
		ww.err = ww.w.Wait()
		if ww.span != nil {
			ww.span(time.Now())
		}
		close(ch)
	}()
	return ww
}
