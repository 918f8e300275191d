package comm

import (
	"errors"
	"sync"
	"testing"
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
