package local

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"trellis/comm"
)

// team is the state the members of one group share: a reusable barrier that
// also publishes each member's operation arguments, the mailboxes of Send and
// Recv, and the error that broke the group.
//
// Memory. A member publishes its buffers when it arrives at an operation's
// first barrier and reads its peers' buffers only between that barrier and
// the operation's last one, and no member leaves the last barrier before all
// have reached it; so the argument slots can be reused by the next operation,
// and the barrier's mutex and channels order every read after the writes it
// depends on.
type team struct {
	key   string
	ranks []int         // world rank of each member
	left  int           // members that have closed (guarded by world.mu)
	poll  time.Duration // how long arrive polls before blocking (Config.Poll)

	mu      sync.Mutex
	count   int           // members arrived at the current barrier
	here    []bool        // which members arrived at the current barrier
	release chan struct{} // closed when the current barrier completes
	args    []args        // each member's arguments of the current operation
	err     error         // what broke the group; nil while healthy
	broken  chan struct{} // closed when err is set
	// inPhase marks members that passed a barrier and may be touching
	// peers' buffers; quiet is signalled when one stops.
	inPhase []bool
	quiet   *sync.Cond

	mail   map[mailKey][]message  // sent, not yet received messages
	held   []int64                // bytes in mail, by receiving member
	spare  [][]comm.Buf           // by receiving member: mailbox buffers received from, for reuse (spares)
	spared []int64                // bytes in spare, by receiving member
	posted map[mailKey][]*recvReq // posted Recvs, oldest first
}

// args are one member's arguments of a collective, for its peers to read and
// to check that every member issued the same operation.
type args struct {
	op     string
	redop  comm.ReduceOp
	root   int
	a, b   comm.Buf  // the operation's buffers (buf, or dst and src)
	length int       // the length every member must agree on
	issued time.Time // when the member's caller issued the operation (comm.Queue.Issued)
}

func newTeam(key string, ranks []int) *team {
	t := &team{
		key:     key,
		ranks:   ranks,
		here:    make([]bool, len(ranks)),
		release: make(chan struct{}),
		args:    make([]args, len(ranks)),
		broken:  make(chan struct{}),
		mail:    map[mailKey][]message{},
		held:    make([]int64, len(ranks)),
		spare:   make([][]comm.Buf, len(ranks)),
		spared:  make([]int64, len(ranks)),
		posted:  map[mailKey][]*recvReq{},
		inPhase: make([]bool, len(ranks)),
	}
	t.quiet = sync.NewCond(&t.mu)
	return t
}

// arrive enters member me into the current barrier, publishing a if not nil,
// and waits until every member has arrived, the group breaks, or the timeout
// passes, which breaks the group with a *comm.PeerError naming the lowest
// absent member.
func (t *team) arrive(me int, a *args, timeout time.Duration, op string) error {
	t.mu.Lock()
	t.leavePhaseLocked(me)
	if t.err != nil {
		t.mu.Unlock()
		return t.err
	}
	if a != nil {
		t.args[me] = *a
	}
	t.here[me] = true
	t.count++
	rel := t.release
	if t.count == len(t.ranks) {
		t.count = 0
		clear(t.here)
		for q := range t.inPhase {
			t.inPhase[q] = true
		}
		close(rel)
		t.release = make(chan struct{})
		t.mu.Unlock()
		return nil
	}
	t.mu.Unlock()

	if t.poll > 0 && comm.Poll(rel, t.poll) {
		return nil
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-rel:
		return nil
	case <-t.broken:
	case <-timer.C:
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	select {
	case <-rel: // completed after all: prefer success
		return nil
	default:
	}
	if t.err == nil {
		t.breakLocked(t.timeoutError(op, timeout))
	}
	return t.err
}

// timeoutError names the members absent from the current barrier.
func (t *team) timeoutError(op string, timeout time.Duration) error {
	var missing []int
	for q, ok := range t.here {
		if !ok {
			missing = append(missing, t.ranks[q])
		}
	}
	return &comm.PeerError{Rank: missing[0], Op: op,
		Err: fmt.Errorf("%w: waited %v for world ranks %v", comm.ErrTimeout, timeout, missing)}
}

func (t *team) leavePhaseLocked(me int) {
	if t.inPhase[me] {
		t.inPhase[me] = false
		t.quiet.Broadcast()
	}
}

// finish ends member me's operation. After a failure it waits until no
// member is inside a phase any more, so that no peer still reads or writes
// this member's buffers once its Work reports the error. Members in a phase
// only copy and reduce, and leave it at their next barrier, so this wait is
// short.
func (t *team) finish(me int, failed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.leavePhaseLocked(me)
	for failed && slices.Contains(t.inPhase, true) {
		t.quiet.Wait()
	}
}

// fail breaks the group with err unless it is already broken.
func (t *team) fail(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		t.breakLocked(err)
	}
}

func (t *team) breakLocked(err error) {
	t.err = err
	close(t.broken)
	go t.failPosted() // it takes t.mu, which the caller holds
}

// check verifies that every member published the same operation with
// matching arguments; all members see the same arguments and so reach the
// same verdict.
func (t *team) check(me int) error {
	a := t.args[me]
	for q, b := range t.args {
		switch {
		case b.op != a.op:
			return fmt.Errorf("%w: %s: member %d issued %s but member %d issued %s", comm.ErrArgs, a.op, me, a.op, q, b.op)
		case b.redop != a.redop:
			return fmt.Errorf("%w: %s: member %d reduces with %v but member %d with %v", comm.ErrArgs, a.op, me, a.redop, q, b.redop)
		case b.root != a.root:
			return fmt.Errorf("%w: %s: member %d has root %d but member %d root %d", comm.ErrArgs, a.op, me, a.root, q, b.root)
		case b.length != a.length || b.a.DType() != a.a.DType():
			return fmt.Errorf("%w: %s: member %d passed %d × %v but member %d passed %d × %v",
				comm.ErrArgs, a.op, me, a.length, a.a.DType(), q, b.length, b.a.DType())
		}
	}
	return nil
}

// waitOrBreak sleeps until deadline, returning early if the group breaks.
func (t *team) waitOrBreak(deadline time.Time) {
	d := time.Until(deadline)
	if d <= 0 {
		return
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-t.broken:
	}
}
