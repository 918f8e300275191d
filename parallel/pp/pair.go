package pp

import (
	"errors"
	"sync"
	"time"

	"trellis/model"
)

// Token is the compute token of a paired forward and backward
// (Config.Pair, ep_overlap=on): the executor and the pair's two streams
// compute only while holding it, so the rank computes on one stream at a
// time — its kernels and threads are the unpaired run's — and a stream
// gives it up only while it waits on a collective of its own group
// (Wait: the model's expert-parallel all-to-alls), which the other stream
// then hides behind its compute. Exposed is the time the token lay free
// while a stream waited: the rank's exposed share of those waits.
type Token struct {
	ch chan struct{}

	mu     sync.Mutex
	free   bool
	comm   int // streams inside Wait
	since  time.Time
	idle   time.Duration // cumulative: free with a stream inside Wait
	waited time.Duration // cumulative: the streams' time inside Wait, overlapping
}

// NewToken is a free token.
func NewToken() *Token {
	t := &Token{ch: make(chan struct{}, 1), free: true, since: time.Now()}
	t.ch <- struct{}{}
	return t
}

// tick adds the time since the last change of state to idle when the
// token lay free while a stream waited (t.mu held).
func (t *Token) tick(now time.Time) {
	if t.free && t.comm > 0 {
		t.idle += now.Sub(t.since)
	}
	t.since = now
}

// Acquire blocks until the caller holds the token.
func (t *Token) Acquire() {
	<-t.ch
	t.mu.Lock()
	t.tick(time.Now())
	t.free = false
	t.mu.Unlock()
}

// Release gives the token up.
func (t *Token) Release() {
	t.mu.Lock()
	t.tick(time.Now())
	t.free = true
	t.mu.Unlock()
	t.ch <- struct{}{}
}

// Wait runs wait (a blocking collective) with the token given up, and
// takes it again before returning wait's error. Called while nobody holds
// the token — outside a step's actions: evaluation, sampling — it runs
// wait alone, as a run without the token would.
func (t *Token) Wait(wait func() error) error {
	t.mu.Lock()
	if t.free {
		t.mu.Unlock()
		return wait()
	}
	t0 := time.Now()
	t.tick(t0)
	t.comm++
	t.free = true
	t.mu.Unlock()
	t.ch <- struct{}{}
	err := wait()
	t.mu.Lock()
	now := time.Now()
	t.tick(now)
	t.comm--
	t.waited += now.Sub(t0)
	t.mu.Unlock()
	t.Acquire()
	return err
}

// Exposed is the cumulative time the token lay free while a stream
// waited in Wait (no stream computing: exposed communication), and the
// streams' cumulative time inside Wait (overlapping: their sum).
func (t *Token) Exposed() (exposed, waited time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.tick(time.Now())
	return t.idle, t.waited
}

// doHeld is do, holding the token (StageConfig.Token) for a compute
// action.
func (s *Stage) doHeld(a Action, batch func(int) (model.Batch, error), dloss float32) (float64, error) {
	if s.cfg.Token != nil && a.Op.Compute() {
		s.cfg.Token.Acquire()
		defer s.cfg.Token.Release()
	}
	return s.do(a, batch, dloss)
}

// pair runs the paired F (on StageConfig.Pair) and the B after it (on
// StageConfig.GPT) as two goroutines sharing the token: F starts with
// it, B takes it at F's first wait. Nothing they share is touched
// without the token (the stage's stash tables, the Params, the device),
// and what each computes depends on its own inputs alone: F writes its
// micro-batch's stash and accumulates no gradient, B accumulates
// B(k)'s gradients in the order an unpaired B does, and the next
// action (B(k+1)) starts after both. So the results are the list's
// order's, bit for bit, whatever the interleaving.
func (s *Stage) pair(f, b Action, batch func(int) (model.Batch, error), dloss float32) (float64, error) {
	in, err := batch(f.MB)
	if err != nil {
		return 0, err
	}
	tok := s.cfg.Token
	var (
		wg         sync.WaitGroup
		loss       float64
		errF, errB error
	)
	tok.Acquire() // F's until its first wait
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer tok.Release()
		loss, errF = s.forwardOn(s.cfg.Pair, f, [2]int{f.MB, f.Chunk}, in)
	}()
	go func() {
		defer wg.Done()
		tok.Acquire()
		defer tok.Release()
		errB = s.backward(b, [2]int{b.MB, b.Chunk}, dloss)
	}()
	wg.Wait()
	return loss, errors.Join(errF, errB)
}
