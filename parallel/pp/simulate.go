package pp

import (
	"errors"
	"fmt"
	"strings"
)

// Costs are the durations of one chunk's passes of one micro-batch, in any
// unit. Without a split backward (every kind but zb-h1) a backward costs
// B+W.
type Costs struct{ F, B, W int64 }

// Unit is F = B = W = 1: a whole backward costs two forwards.
var Unit = Costs{F: 1, B: 1, W: 1}

// Result is what Simulate measured.
type Result struct {
	Makespan int64   // the step, first action to last
	Busy     []int64 // (PP) per rank: time in F, B, W
	End      []int64 // (PP) per rank: when its last action ended
	// InFlight is each rank's peak number of (micro-batch, chunk) pairs
	// whose forward has run and whose activations are still kept: until
	// the backward, or for zb-h1 and dualpipev until W. The executor keeps one free list
	// of stashes for all its chunks, each sized for its largest chunk, so
	// its blocks' act peak is InFlight × that stash.
	InFlight []int
	// ChunkInFlight is the same per chunk, (PP, VPP).
	ChunkInFlight [][]int
	// Deferred is zb-h1's and dualpipev's peak, per rank and chunk, of pairs whose B has
	// run and whose W has not: each holds a weight stash.
	Deferred [][]int
	// Start is each action's start time, parallel to Schedule.Ranks.
	Start [][]int64
}

// Bubble is the idle fraction of the step, the same on every rank when the
// ranks do equal work: (Makespan − Busy)/Makespan of the busiest rank.
func (r Result) Bubble() float64 {
	var busy int64
	for _, b := range r.Busy {
		busy = max(busy, b)
	}
	if r.Makespan == 0 {
		return 0
	}
	return float64(r.Makespan-busy) / float64(r.Makespan)
}

// msgKey names one message: activations (grad false) or gradients into
// model stage `to` for micro-batch mb.
type msgKey struct {
	grad   bool
	mb, to int
}

// simRank is one rank's progress through its list.
type simRank struct {
	pc       int
	clock    int64
	got      map[msgKey]bool // messages received
	fwd, bwd map[[2]int]bool // (mb, chunk) whose F / B has run
	live     int             // pairs in flight now
	chunk    []int           // (VPP) pairs in flight per chunk
	deferred []int           // (VPP) pairs between B and W per chunk
	movable  []int           // indices of the rank's movable actions, in list order
	next     int             // movable[next] is the first not yet run
	ahead    map[int]bool    // list indices of movable actions run ahead
}

// Simulate runs every rank's list at costs c. A send takes no time and
// never waits (the transport buffers it); a receive waits for its send.
// Movable actions run as the executor runs them (ahead.go): a rank whose
// receive's message is still due after waiting as long as its next movable
// action takes runs that action, if its backward has run, and again while
// the message is due later; at its place in the list the action then takes
// no time but frees what it holds (so InFlight and Deferred are the static
// list's). It
// fails, naming the ranks and their stuck actions, if the lists deadlock,
// and, naming the action, if one runs before what it depends on (its
// input received, its own forward before its backward, B before W) or a
// pass is missing or repeated.
func Simulate(s *Schedule, c Costs) (Result, error) {
	return SimulateWith(s, func(_ int, a Action) int64 {
		switch {
		case a.Op == Forward:
			return c.F
		case a.Op == Weight:
			return c.W
		case a.Op == Backward && s.Split():
			return c.B
		case a.Op == Backward:
			return c.B + c.W
		}
		return 0
	})
}

// SimulateWith is Simulate with each compute action's own duration, cost(rank,
// action): replaying the durations a trace measured gives the bubble the
// schedule's dependencies alone impose on them (Replay).
func SimulateWith(s *Schedule, cost func(rank int, a Action) int64) (Result, error) {
	return SimulateLink(s, cost, Wire{})
}

// Wire is a transfer model for SimulateLink, in the costs' unit: a message
// sent at t leaves when the link towards its peer is free, occupies it for
// Gap (its bytes over the bandwidth: messages in one direction queue) and
// arrives Latency later (latencies of queued messages overlap):
//
//	leave = max(t, free);  free = leave + Gap;  arrive = free + Latency
type Wire struct{ Latency, Gap int64 }

// SimulateLink is SimulateWith with every message delayed by the link
// model: the bubble a schedule has on given compute durations and a given
// network, with no other overhead.
func SimulateLink(s *Schedule, cost func(rank int, a Action) int64, link Wire) (Result, error) {
	p := s.PP
	res := Result{Busy: make([]int64, p), End: make([]int64, p), InFlight: make([]int, p), Start: make([][]int64, p), ChunkInFlight: make([][]int, p), Deferred: make([][]int, p)}
	rs := make([]*simRank, p)
	for r := range rs {
		rs[r] = &simRank{got: map[msgKey]bool{}, fwd: map[[2]int]bool{}, bwd: map[[2]int]bool{}, chunk: make([]int, s.vpp()), deferred: make([]int, s.vpp()), ahead: map[int]bool{}}
		for i, a := range s.Ranks[r] {
			if a.Movable {
				rs[r].movable = append(rs[r].movable, i)
			}
		}
		res.ChunkInFlight[r] = make([]int, s.vpp())
		res.Deferred[r] = make([]int, s.vpp())
		res.Start[r] = make([]int64, len(s.Ranks[r]))
	}
	sent := map[msgKey]int64{} // arrival time
	lk := links{model: link, free: map[[2]int]int64{}}
	for {
		progress, done := false, true
		for r, st := range rs {
			for st.pc < len(s.Ranks[r]) {
				a := s.Ranks[r][st.pc]
				for s.runAhead(r, a, st, sent, cost, &res) {
				}
				start, ok, err := s.ready(r, a, st, sent)
				if err != nil {
					return res, err
				}
				if !ok {
					break
				}
				if !st.ahead[st.pc] {
					res.Start[r][st.pc] = start
				}
				if err := s.apply(r, a, st, start, cost, sent, lk, &res); err != nil {
					return res, err
				}
				st.pc++
				progress = true
			}
			done = done && st.pc == len(s.Ranks[r])
		}
		if done {
			break
		}
		if !progress {
			return res, s.deadlock(rs)
		}
	}
	for r, st := range rs {
		res.Makespan = max(res.Makespan, st.clock)
		res.End[r] = st.clock
		if err := s.complete(r, st); err != nil {
			return res, err
		}
	}
	return res, nil
}

// runAhead runs rank r's next movable action if a is a receive whose
// message is due more than that action's duration c after the rank is
// ready and the action's backward has run: the rank waits c (its
// patience), then runs the action, taking c more.
func (s *Schedule) runAhead(r int, a Action, st *simRank, sent map[msgKey]int64, cost func(int, Action) int64, res *Result) bool {
	if (a.Op != RecvAct && a.Op != RecvGrad) || st.next >= len(st.movable) {
		return false
	}
	t, ok := sent[msgKey{grad: a.Op == RecvGrad, mb: a.MB, to: s.Placement().Stage(r, a.Chunk)}]
	i := st.movable[st.next]
	m := s.Ranks[r][i]
	if !ok || m.Op != Weight || !st.bwd[[2]int{m.MB, m.Chunk}] {
		return false
	}
	c := cost(r, m)
	if t <= st.clock+c { // the message comes within the rank's patience
		return false
	}
	st.clock += c // waited as long as the W takes
	res.Start[r][i] = st.clock
	res.Busy[r] += c
	st.clock += c
	st.ahead[i] = true
	st.next++
	return true
}

// ready says when action a of rank r can start; ok is false while a
// receive's message has not been sent.
func (s *Schedule) ready(r int, a Action, st *simRank, sent map[msgKey]int64) (int64, bool, error) {
	stage := s.Placement().Stage(r, a.Chunk)
	switch a.Op {
	case RecvAct, RecvGrad:
		k := msgKey{grad: a.Op == RecvGrad, mb: a.MB, to: stage}
		t, ok := sent[k]
		if !ok {
			return 0, false, nil
		}
		delete(sent, k)
		return max(st.clock, t), true, nil
	}
	return st.clock, true, nil
}

// apply checks a's dependencies on rank r and runs it from start.
func (s *Schedule) apply(r int, a Action, st *simRank, start int64, costOf func(int, Action) int64, sent map[msgKey]int64, lk links, res *Result) error {
	pl, S := s.Placement(), s.Stages()
	stage, key := pl.Stage(r, a.Chunk), [2]int{a.MB, a.Chunk}
	prev, next := pl.Neighbours(r, a.Chunk)
	bad := func(why string) error { return fmt.Errorf("pp: rank %d action %v: %s", r, a, why) }
	cost := int64(0)
	switch a.Op {
	case Forward:
		if st.fwd[key] {
			return bad("forward repeated")
		}
		if prev.Remote(r) && !st.got[msgKey{mb: a.MB, to: stage}] {
			return bad("runs before its input activations are received")
		}
		if prev.Local(r) && !st.fwd[[2]int{a.MB, prev.Chunk}] {
			return bad("runs before the forward of the stage before it, on this rank")
		}
		st.fwd[key] = true
		st.live++
		st.chunk[a.Chunk]++
		res.InFlight[r] = max(res.InFlight[r], st.live)
		res.ChunkInFlight[r][a.Chunk] = max(res.ChunkInFlight[r][a.Chunk], st.chunk[a.Chunk])
	case Backward:
		switch {
		case !st.fwd[key]:
			return bad("runs before its forward")
		case st.bwd[key]:
			return bad("backward repeated")
		case next.Remote(r) && !st.got[msgKey{grad: true, mb: a.MB, to: stage}]:
			return bad("runs before its output gradient is received")
		case next.Local(r) && !st.bwd[[2]int{a.MB, next.Chunk}]:
			return bad("runs before the backward of the stage after it, on this rank")
		}
		st.bwd[key] = true
		if !s.Split() {
			st.live--
			st.chunk[a.Chunk]--
		} else {
			st.deferred[a.Chunk]++
			res.Deferred[r][a.Chunk] = max(res.Deferred[r][a.Chunk], st.deferred[a.Chunk])
		}
	case Weight:
		if !s.Split() || !st.bwd[key] {
			return bad("weight gradient without a split backward before it")
		}
		if a.Movable {
			if st.ahead[st.pc] {
				st.live-- // ran ahead: only its stashes are freed here
				st.chunk[a.Chunk]--
				st.deferred[a.Chunk]--
				return nil
			}
			st.next++
		}
		st.live--
		st.chunk[a.Chunk]--
		st.deferred[a.Chunk]--
	case RecvAct, RecvGrad:
		from := prev
		if a.Op == RecvGrad {
			from = next
		}
		if !from.Remote(r) || a.Peer != from.Rank {
			return bad("receives from the wrong rank")
		}
		st.got[msgKey{grad: a.Op == RecvGrad, mb: a.MB, to: stage}] = true
	case SendAct, SendGrad:
		to, want := stage+1, next
		if a.Op == SendGrad {
			to, want = stage-1, prev
		}
		done := st.fwd[key]
		if a.Op == SendGrad {
			done = st.bwd[key]
		}
		if to < 0 || to >= S || !want.Remote(r) || a.Peer != want.Rank || !done {
			return bad("sends what it has not computed, or to the wrong rank")
		}
		k := msgKey{grad: a.Op == SendGrad, mb: a.MB, to: to}
		if _, dup := sent[k]; dup {
			return bad("message sent twice")
		}
		sent[k] = lk.arrive(r, a.Peer, start)
	}
	if a.Op.Compute() {
		cost = costOf(r, a)
		res.Busy[r] += cost
	}
	st.clock = start + cost
	return nil
}

// links is SimulateLink's state: when each direction's link is free.
type links struct {
	model Wire
	free  map[[2]int]int64 // (from, to) rank
}

// arrive is when a message sent from rank r to peer at t arrives.
func (l links) arrive(r, peer int, t int64) int64 {
	if l.model == (Wire{}) {
		return t
	}
	leave := max(t, l.free[[2]int{r, peer}])
	l.free[[2]int{r, peer}] = leave + l.model.Gap
	return leave + l.model.Gap + l.model.Latency
}

// complete checks that rank r ran every pass of its chunks once.
func (s *Schedule) complete(r int, st *simRank) error {
	want := s.Micro * s.vpp()
	if len(st.fwd) != want || len(st.bwd) != want || st.live != 0 {
		return fmt.Errorf("pp: rank %d ran %d forwards and %d backwards with %d micro-batches left in flight, want %d each and none",
			r, len(st.fwd), len(st.bwd), st.live, want)
	}
	return nil
}

// deadlock names every stuck rank and the action it waits at.
func (s *Schedule) deadlock(rs []*simRank) error {
	var parts []string
	for r, st := range rs {
		if st.pc < len(s.Ranks[r]) {
			parts = append(parts, fmt.Sprintf("rank %d at %v", r, s.Ranks[r][st.pc]))
		}
	}
	return errors.New("pp: the schedule deadlocks: " + strings.Join(parts, ", "))
}
