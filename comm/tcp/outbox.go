package tcp

import "sync"

// outbox queues a peer's outgoing frames without ever blocking the sender.
type outbox struct {
	mu   sync.Mutex
	q    []*req
	err  error // data frames fail with it; control frames still go
	wake chan struct{}
}

func (o *outbox) push(r *req) {
	o.mu.Lock()
	if o.err != nil && !r.ctrl {
		err := o.err
		o.mu.Unlock()
		r.done <- err
		return
	}
	o.q = append(o.q, r)
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// takeAll returns the queued frames, having failed the data frames if the
// outbox is failed.
func (o *outbox) takeAll() []*req {
	o.mu.Lock()
	q, err := o.q, o.err
	o.q = nil
	o.mu.Unlock()
	if err == nil {
		return q
	}
	keep := q[:0]
	for _, r := range q {
		if r.ctrl {
			keep = append(keep, r)
		} else {
			r.done <- err
		}
	}
	return keep
}

// failData fails queued and later data frames.
func (o *outbox) failData(err error) {
	o.mu.Lock()
	if o.err == nil {
		o.err = err
	}
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}
