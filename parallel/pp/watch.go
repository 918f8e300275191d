package pp

import (
	"time"

	"trellis/comm"
	"trellis/trace"
)

// watched is a Work whose completion is observable without blocking (for
// reusing the buffers of finished sends) and, when tracing, is recorded on
// the comm lane from issue to completion. Wait waits on the transfer
// itself, not on the watching goroutine: a rank blocked on a transfer
// resumes the moment it completes, even while the watcher has no CPU to
// run on (the ranks' compute occupies every processor).
type watched struct {
	w   comm.Work
	ch  chan struct{}
	err error
}

func (w *watched) Wait() error { return w.w.Wait() }

func (w *watched) done() bool {
	select {
	case <-w.ch:
		return true
	default:
		return false
	}
}

// finishedAt is implemented by the Works of comm's queues: when the
// operation completed.
type finishedAt interface{ FinishedAt() time.Time }

// watch starts following p's Work on a goroutine.
func (s *Stage) watch(p pending, what string, a Action) pending {
	ww := &watched{w: p.w, ch: make(chan struct{})}
	tr := s.cfg.Trace
	t0 := tr.Now()
	go func() {
		ww.err = ww.w.Wait()
		if tr != nil {
			end := time.Now()
			if f, ok := ww.w.(finishedAt); ok && !f.FinishedAt().IsZero() {
				end = f.FinishedAt() // not when the watcher got to run
			}
			tr.SpanTo(trace.Comm, what+" "+a.String(), t0, end, "peer", a.Peer)
		}
		close(ww.ch)
	}()
	p.w = ww
	return p
}
