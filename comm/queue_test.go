package comm

import (
	"errors"
	"sync"
	"testing"
	"time"
)

func TestQueueOrderAndStickyError(t *testing.T) {
	q := NewQueue()
	defer q.Close()
	var mu sync.Mutex
	var order []int
	var ws []Work
	for i := 0; i < 100; i++ {
		i := i
		ws = append(ws, q.Submit(4, func() error {
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			return nil
		}))
	}
	for _, w := range ws {
		if err := w.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	for i, v := range order {
		if v != i {
			t.Fatalf("ran out of order: %v", order)
		}
	}
	if s := q.Stats(); s.Ops != 100 || s.Bytes != 400 {
		t.Fatalf("stats %+v", s)
	}
	boom := errors.New("boom")
	w1 := q.Submit(0, func() error { return boom })
	w2 := q.Submit(0, func() error { t.Error("ran after failure"); return nil })
	if !errors.Is(w1.Wait(), boom) || !errors.Is(w2.Wait(), boom) {
		t.Fatal("error not sticky")
	}
	if !errors.Is(q.Submit(0, func() error { return nil }).Wait(), boom) {
		t.Fatal("later op did not fail fast")
	}
}

func TestQueueClose(t *testing.T) {
	q := NewQueue()
	block := make(chan struct{})
	w1 := q.Submit(0, func() error { <-block; return nil })
	w2 := q.Submit(0, func() error { return nil })
	go func() { close(block) }()
	q.Close()
	if err := w1.Wait(); err != nil && !errors.Is(err, ErrClosed) {
		t.Fatalf("first op: %v", err)
	}
	if err := w2.Wait(); err != nil && !errors.Is(err, ErrClosed) {
		t.Fatalf("pending op: %v", err)
	}
	if !errors.Is(q.Submit(0, func() error { return nil }).Wait(), ErrClosed) {
		t.Fatal("submit after close")
	}
	if Done(nil).Wait() != nil {
		t.Fatal("Done")
	}
}

func TestPeerError(t *testing.T) {
	err := error(&PeerError{Rank: 3, Op: "allreduce", Err: ErrTimeout})
	if !errors.Is(err, ErrPeer) || !errors.Is(err, ErrTimeout) {
		t.Fatal("errors.Is")
	}
	if err.Error() != "comm: allreduce: rank 3 failed: comm: timeout" {
		t.Fatal(err.Error())
	}
}

// TestQueueStart: operations started outside the order are accounted like
// queued ones, run while the queue is blocked, and their failure breaks
// the queue; a broken or closed queue starts nothing.
func TestQueueStart(t *testing.T) {
	q := NewQueue()
	defer q.Close()
	block := make(chan struct{})
	queued := q.Submit(0, func() error { <-block; return nil })
	w1, finish1, err := q.Start(10)
	if err != nil {
		t.Fatal(err)
	}
	w2, finish2, _ := q.Start(20)
	finish1(nil) // completes although the queue is blocked
	if err := w1.Wait(); err != nil {
		t.Fatal(err)
	}
	finish2(nil)
	w2.Wait()
	close(block)
	queued.Wait()
	if s := q.Stats(); s.Ops != 3 || s.Bytes != 30 || s.Busy <= 0 {
		t.Fatalf("stats %+v, want 3 ops, 30 bytes, some Busy", s)
	}
	boom := errors.New("boom")
	w3, finish3, _ := q.Start(0)
	finish3(boom)
	if !errors.Is(w3.Wait(), boom) || !errors.Is(q.Submit(0, func() error { return nil }).Wait(), boom) {
		t.Fatal("a failed started op did not break the queue")
	}
	if _, _, err := q.Start(0); !errors.Is(err, boom) {
		t.Fatalf("Start on a broken queue: %v", err)
	}
	q2 := NewQueue()
	q2.Close()
	if _, _, err := q2.Start(0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start on a closed queue: %v", err)
	}
}

// TestBatchP2PJoinsErrors: a batch waits for every op and reports each
// failure.
func TestBatchP2PJoinsErrors(t *testing.T) {
	a, b := errors.New("a"), errors.New("b")
	w := batch{Done(a), Done(nil), Done(b)}
	if err := w.Wait(); !errors.Is(err, a) || !errors.Is(err, b) {
		t.Fatalf("got %v, want both errors", err)
	}
	if err := (batch{Done(nil)}).Wait(); err != nil {
		t.Fatal(err)
	}
}

// Operations run in issue order whoever runs them: waiting for a later
// operation never runs it before the ones issued earlier (a waiter runs
// only the next operation, and only when none runs), and every operation
// is accounted once.
func TestQueueWaiterKeepsIssueOrder(t *testing.T) {
	q := NewQueue()
	defer q.Close()
	var mu sync.Mutex
	var order []int
	const n = 200
	works := make([]Work, n)
	release := make(chan struct{})
	for i := range works {
		works[i] = q.Submit(1, func() error {
			if i == 0 {
				<-release // the queue is busy while later ones are issued
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			return nil
		})
	}
	done := make(chan struct{})
	go func() { // a waiter on the last, while the first still runs
		works[n-1].Wait()
		close(done)
	}()
	close(release)
	for i := n - 2; i >= 0; i -= 3 { // waits out of order
		if err := works[i].Wait(); err != nil {
			t.Fatal(err)
		}
	}
	<-done
	for i := range works {
		works[i].Wait()
	}
	for i, v := range order {
		if v != i {
			t.Fatalf("operation %d ran %dth", v, i)
		}
	}
	if s := q.Stats(); s.Ops != n || len(order) != n {
		t.Errorf("ops accounted %d, ran %d, want %d", s.Ops, len(order), n)
	}
	// Synchronous use: each waited for at once (the waiter runs it when
	// the queue is idle).
	for i := 0; i < 50; i++ {
		ran := false
		if err := q.Submit(0, func() error { ran = true; return nil }).Wait(); err != nil || !ran {
			t.Fatalf("synchronous operation %d: ran %v, err %v", i, ran, err)
		}
	}
}

// TestPoll: Poll reports a closed channel at once, gives up on an open
// one after its duration (not before), looks once at d ≤ 0, and sees a
// channel closed while it polls.
func TestPoll(t *testing.T) {
	closed := make(chan struct{})
	close(closed)
	if !Poll(closed, time.Hour) || !Poll(closed, 0) {
		t.Error("a closed channel: want true")
	}
	open := make(chan struct{})
	start := time.Now()
	if Poll(open, 5*time.Millisecond) || time.Since(start) < 5*time.Millisecond {
		t.Errorf("an open channel: want false after at least 5 ms, took %v", time.Since(start))
	}
	if Poll(open, 0) {
		t.Error("an open channel at d = 0: want false")
	}
	later := make(chan struct{})
	time.AfterFunc(2*time.Millisecond, func() { close(later) })
	if !Poll(later, time.Second) {
		t.Error("a channel closed during the poll: want true")
	}
}
