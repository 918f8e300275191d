package commtest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"trellis/comm"
	"trellis/comm/local"
	"trellis/tensor"
)

// The suite must fail for broken backends: each mutant wraps the local
// backend with one defect, and the case that should catch it must fail.

// mutant is rank r's world group with a defect.
type mutant struct {
	comm.Group
	defect string
	mu     sync.Mutex
	held   map[[2]int]comm.Buf // "fifo": a message held back per (peer, tag)
	last   *chain              // "queued-p2p": the latest Send or Recv
}

// flip changes the lowest bit of element i.
func flip(b comm.Buf, i int) {
	if b.DType() == tensor.BF16 {
		b.BFloat16s()[i] ^= 1
	} else {
		f := b.Float32s()
		f[i] = float32(float64(f[i])*(1+1e-6)) + 1e-30
	}
}

// then runs after w completes successfully.
type then struct {
	w  comm.Work
	fn func()
}

func (t then) Wait() error {
	err := t.w.Wait()
	if err == nil {
		t.fn()
	}
	return err
}

// lazy issues its op only when waited on.
type lazy struct {
	once sync.Once
	do   func() comm.Work
	w    comm.Work
}

func (l *lazy) Wait() error {
	l.once.Do(func() { l.w = l.do() })
	return l.w.Wait()
}

type lostPeer struct{ w comm.Work }

func (l lostPeer) Wait() error {
	if err := l.w.Wait(); err != nil {
		return fmt.Errorf("something failed: %v", err) // %v drops the *PeerError
	}
	return nil
}

func (m *mutant) AllReduce(buf comm.Buf, op comm.ReduceOp) comm.Work {
	switch {
	case m.defect == "allreduce-differs" && m.Rank() == m.Size()-1 && buf.Len() > 0:
		return then{m.Group.AllReduce(buf, op), func() { flip(buf, buf.Len()/2) }}
	case m.defect == "avg-is-sum" && op == comm.Avg:
		return m.Group.AllReduce(buf, comm.Sum)
	case m.defect == "errors-lose-rank":
		return lostPeer{m.Group.AllReduce(buf, op)}
	case m.defect == "rotated-order" && op != comm.Max && m.Size() > 2:
		return comm.Done(m.rotatedAllReduce(buf, op))
	}
	return m.Group.AllReduce(buf, op)
}

// rotatedAllReduce folds every rank's buf in the order 1, 2, …, p-1, 0 (a
// ring's order for chunk 0): the same on every rank and within every
// rounding bound, but not rank order.
func (m *mutant) rotatedAllReduce(buf comm.Buf, op comm.ReduceOp) error {
	p, n := m.Size(), buf.Len()
	all := newBuf(buf.DType(), p*n)
	if err := comm.AllGather(m.Group, all, buf); err != nil {
		return err
	}
	srcs := make([]comm.Buf, p)
	for k := range srcs {
		j := (k + 1) % p
		srcs[k] = all.Slice(j*n, (j+1)*n)
	}
	comm.Reduce(buf, srcs, op, p)
	return nil
}

func (m *mutant) AllGather(dst, src comm.Buf) comm.Work {
	if m.defect == "allgather-order" && m.Size() > 1 && src.Len() > 0 {
		return then{m.Group.AllGather(dst, src), func() { swapChunks(dst, m.Size()) }}
	}
	return m.Group.AllGather(dst, src)
}

func (m *mutant) AllToAll(dst, src comm.Buf) comm.Work {
	if m.defect == "alltoall-order" && m.Size() > 1 && src.Len() > 0 {
		return then{m.Group.AllToAll(dst, src), func() { swapChunks(dst, m.Size()) }}
	}
	return m.Group.AllToAll(dst, src)
}

// swapChunks exchanges the first two of p chunks.
func swapChunks(b comm.Buf, p int) {
	n := b.Len() / p
	for i := 0; i < n; i++ {
		x, y := b.Slice(i, i+1), b.Slice(n+i, n+i+1)
		tmp := newBuf(b.DType(), 1)
		copyInto(tmp, x)
		copyInto(x, y)
		copyInto(y, tmp)
	}
}

func (m *mutant) ReduceScatter(dst, src comm.Buf, op comm.ReduceOp) comm.Work {
	if m.defect == "reducescatter-max-is-sum" && op == comm.Max {
		op = comm.Sum
	}
	return m.Group.ReduceScatter(dst, src, op)
}

func (m *mutant) Broadcast(buf comm.Buf, root int) comm.Work {
	switch m.defect {
	case "broadcast-root-0":
		root = 0
	case "no-arg-check":
		if root < 0 || root >= m.Size() {
			return comm.Done(nil)
		}
	case "out-of-order":
		return &lazy{do: func() comm.Work { return m.Group.Broadcast(buf, root) }}
	}
	return m.Group.Broadcast(buf, root)
}

// serial runs do after the previous serialized op finished, the way a
// backend that ran Send and Recv on its queue would.
func (m *mutant) serial(do func() comm.Work) comm.Work {
	m.mu.Lock()
	prev := m.last
	l := &chain{done: make(chan struct{})}
	m.last = l
	m.mu.Unlock()
	go func() {
		if prev != nil {
			prev.Wait()
		}
		l.err = do().Wait()
		close(l.done)
	}()
	return l
}

type chain struct {
	done chan struct{}
	err  error
}

func (c *chain) Wait() error { <-c.done; return c.err }

func (m *mutant) Recv(buf comm.Buf, peer, tag int) comm.Work {
	if m.defect == "queued-p2p" {
		return m.serial(func() comm.Work { return m.Group.Recv(buf, peer, tag) })
	}
	return m.Group.Recv(buf, peer, tag)
}

func (m *mutant) Send(buf comm.Buf, peer, tag int) comm.Work {
	if m.defect == "queued-p2p" {
		return m.serial(func() comm.Work { return m.Group.Send(buf, peer, tag) })
	}
	if m.defect != "fifo" || tag != 1 {
		return m.Group.Send(buf, peer, tag)
	}
	// Hold back every other message of a tag-1 stream and send it after
	// the next one: messages overtake each other.
	m.mu.Lock()
	defer m.mu.Unlock()
	k := [2]int{peer, tag}
	held, ok := m.held[k]
	if !ok {
		m.held[k] = clone(buf)
		return comm.Done(nil)
	}
	delete(m.held, k)
	w := m.Group.Send(buf, peer, tag)
	return then{w, func() { comm.Send(m.Group, held, peer, tag) }}
}

func (m *mutant) Barrier() comm.Work {
	if m.defect == "barrier-no-wait" {
		return comm.Done(nil)
	}
	return m.Group.Barrier()
}

func (m *mutant) Stats() comm.Stats {
	s := m.Group.Stats()
	if m.defect == "stats-miscount" {
		s.Ops++
	}
	return s
}

func (m *mutant) NewGroup(name string, ranks []int) (comm.Group, error) {
	g, err := m.Group.NewGroup(name, ranks)
	if m.defect == "subgroup-ranks" && err == nil {
		return reversedRanks{g}, nil
	}
	return g, err
}

type reversedRanks struct{ comm.Group }

func (r reversedRanks) GlobalRanks() []int {
	g := r.Group.GlobalRanks()
	slices.Reverse(g)
	return g
}

func mutantFactory(defect string) Factory {
	return func(t *testing.T, n int, opts Options) World {
		gs, err := local.New(local.Config{Size: n, Timeout: min(opts.Timeout, 2*time.Second), MaxBuffered: opts.MaxBuffered})
		if err != nil {
			t.Fatal(err)
		}
		for r, g := range gs {
			gs[r] = &mutant{Group: g, defect: defect, held: map[[2]int]comm.Buf{}}
		}
		return World{Groups: gs}
	}
}

func TestSuiteCatchesMutants(t *testing.T) {
	cases := []struct {
		defect string
		run    func(e *env) error
	}{
		{"allreduce-differs", collectives(3)},
		{"avg-is-sum", collectives(2)},
		{"allgather-order", collectives(3)},
		{"alltoall-order", collectives(2)},
		{"reducescatter-max-is-sum", collectives(3)},
		{"broadcast-root-0", collectives(3)},
		{"fifo", func(e *env) error {
			return tagsAndOrder(e.world(2, normalTimeout).Groups, tensor.F32, 1)
		}},
		{"queued-p2p", recvFirst(2)},
		{"queued-p2p", manyInFlight(3)},
		{"barrier-no-wait", barrierCase},
		{"stats-miscount", statsCase},
		{"no-arg-check", argsCase},
		{"out-of-order", asyncOrder},
		{"subgroup-ranks", subgroups},
		{"errors-lose-rank", closePeer},
		{"errors-lose-rank", silentPeer},
		{"rotated-order", rankOrder(3)},
	}
	for _, c := range cases {
		t.Run(c.defect, func(t *testing.T) {
			err := c.run(&env{t: t, f: mutantFactory(c.defect), large: 1 << 10})
			if err == nil {
				t.Fatalf("the suite passed a backend with defect %q", c.defect)
			}
			t.Logf("caught: %.200v", err)
		})
	}
	// And the unmutated backend passes the same cases.
	t.Run("none", func(t *testing.T) {
		for _, c := range cases {
			if err := c.run(&env{t: t, f: mutantFactory("none"), large: 1 << 10}); err != nil {
				t.Errorf("clean backend failed: %v", err)
			}
		}
	})
}
