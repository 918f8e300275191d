package pp

import (
	"trellis/comm"
	"trellis/trace"
)

// watched is a Work whose completion is observable without blocking (for
// reusing the buffers of finished sends) and, when tracing, is recorded on
// the comm lane from issue to completion.
type watched struct {
	w   comm.Work
	ch  chan struct{}
	err error
}

func (w *watched) Wait() error {
	<-w.ch
	return w.err
}

func (w *watched) done() bool {
	select {
	case <-w.ch:
		return true
	default:
		return false
	}
}

// watch starts following p's Work on a goroutine.
func (s *Stage) watch(p pending, what string, a Action) pending {
	ww := &watched{w: p.w, ch: make(chan struct{})}
	tr := s.cfg.Trace
	t0 := tr.Now()
	go func() {
		ww.err = ww.w.Wait()
		if tr != nil {
			tr.Span(trace.Comm, what+" "+a.String(), t0, "peer", a.Peer)
		}
		close(ww.ch)
	}()
	p.w = ww
	return p
}
