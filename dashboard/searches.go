package dashboard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"trellis/plan"
	"trellis/viz"
)

// searches runs the explorer's plan searches: at most cfg.Searches at
// once, each stopped after cfg.SearchTimeout, and the last cfg.Cache
// pages' results kept (a page is its inputs), so that reloads, shared
// links and many clients asking the same cost one search.
type searches struct {
	cfg   ExplorerConfig
	slots chan struct{} // one token per running search

	mu    sync.Mutex
	cache map[PlanInputs]explored
	order []PlanInputs // oldest first
}

type explored struct {
	status string
	panels []viz.Panel
	err    error
}

func (x *searches) explore(ctx context.Context, in PlanInputs) (string, []viz.Panel, error) {
	if e, ok := x.cached(in); ok {
		return e.status, e.panels, e.err
	}
	timer := time.NewTimer(x.cfg.SearchTimeout)
	defer timer.Stop()
	select {
	case x.slots <- struct{}{}:
		defer func() { <-x.slots }()
	case <-timer.C:
		return "", nil, fmt.Errorf("the explorer is busy: %d searches are running; try again shortly", x.cfg.Searches)
	case <-ctx.Done():
		return "", nil, ctx.Err()
	}
	if e, ok := x.cached(in); ok { // found while this request waited
		return e.status, e.panels, e.err
	}
	stop := make(chan struct{})
	go func() {
		select {
		case <-timer.C:
		case <-ctx.Done():
		}
		close(stop)
	}()
	status, panels, err := explore(x.cfg, in, stop)
	if errors.Is(err, plan.ErrStopped) {
		if ctx.Err() != nil {
			return "", nil, ctx.Err()
		}
		return "", nil, fmt.Errorf("the search took longer than %v and was stopped: pin keys (e.g. tp=8,pp=4) or plan for fewer devices", x.cfg.SearchTimeout)
	}
	x.keep(in, explored{status, panels, err})
	return status, panels, err
}

func (x *searches) cached(in PlanInputs) (explored, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e, ok := x.cache[in]
	return e, ok
}

func (x *searches) keep(in PlanInputs, e explored) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if _, ok := x.cache[in]; ok {
		return
	}
	if len(x.order) >= x.cfg.Cache {
		delete(x.cache, x.order[0])
		x.order = x.order[1:]
	}
	x.cache[in] = e
	x.order = append(x.order, in)
}
