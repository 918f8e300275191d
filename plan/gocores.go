package plan

// goCores are a host's cores as Go's scheduler gives them to the
// engine's goroutine ranks (hostPipe.makespan's lanes): each core runs
// one lane (run, −1: idle) and holds the lanes that passes run on it
// woke — the latest in next (Go's runnext), the ones it displaced queued
// in order (the P's local run queue).
type goCores []goCore

type goCore struct {
	run, next int
	queue     []int
}

// newGoCores is n idle cores.
func newGoCores(n int) goCores {
	cs := make(goCores, n)
	for c := range cs {
		cs[c] = goCore{run: -1, next: -1}
	}
	return cs
}

// wake queues lane l, woken by a pass on core c, on c: in next, the one
// it displaces behind c's queue.
func (cs goCores) wake(c, l int) {
	k := &cs[c]
	if k.next >= 0 {
		k.queue = append(k.queue, k.next)
	}
	k.next = l
}

// take is the lane core c runs next (−1: none): its own woken one, its
// queue's head, or, stolen, another core's oldest queued one or, failing
// that, its woken one (Go steals runnext last).
func (cs goCores) take(c int) int {
	k := &cs[c]
	if l := k.next; l >= 0 {
		k.next = -1
		return l
	}
	if len(k.queue) > 0 {
		l := k.queue[0]
		k.queue = k.queue[1:]
		return l
	}
	for o := range cs {
		if v := &cs[o]; o != c && len(v.queue) > 0 {
			l := v.queue[0]
			v.queue = v.queue[1:]
			return l
		}
	}
	for o := range cs {
		if v := &cs[o]; o != c && v.next >= 0 {
			l := v.next
			v.next = -1
			return l
		}
	}
	return -1
}
