//go:build mpi

package mpi

// #include "tmpi.h"
import "C"

import (
	"fmt"
	"hash/fnv"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"trellis/comm"
)

// group is one rank's member of an MPI communicator.
type group struct {
	cfg    Config
	c      C.MPI_Comm // collectives and NewGroup
	pc     C.MPI_Comm // point-to-point (probed with MPI_ANY_TAG)
	rank   int
	size   int
	global []int // world rank of each group rank
	tagUB  int   // MPI_TAG_UB
	q      *comm.Queue
	closed chan struct{}
	once   sync.Once
	p2p    matcher
	polled chan struct{} // closed when the progress goroutine has stopped

	// While a collective of this group is being waited for, its waiter
	// drains the point-to-point traffic (every drainEvery) and the progress
	// goroutine sleeps: one polling thread per rank, not two competing for
	// the cores (and for MPI's progress lock) with the other ranks'.
	waiting atomic.Int32
	resume  chan struct{} // a token when waiting drops to zero

	family *family // every group made from the same world

	mu     sync.Mutex
	leaked []*runtime.Pinner // pins of requests that passed their deadline
}

// family is a world group and every group made from it, for Finalize.
type family struct {
	mu     sync.Mutex
	groups []*group
}

func (f *family) add(g *group) {
	f.mu.Lock()
	f.groups = append(f.groups, g)
	f.mu.Unlock()
}

// Finalize closes world and every group made from it (stopping their
// progress goroutines, which call MPI) and then ends MPI in this process.
// Call it once, last (mpirun treats a rank that exits without
// MPI_Finalize as failed).
func Finalize(world comm.Group) error {
	if g, ok := world.(*group); ok {
		g.family.mu.Lock()
		gs := g.family.groups
		g.family.mu.Unlock()
		for _, m := range gs {
			m.Close()
		}
	}
	return finalize()
}

// World initializes MPI (MPI_THREAD_MULTIPLE) and returns this process's
// world group. Call it once per process.
func World(cfg Config) (comm.Group, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxBuffered <= 0 {
		cfg.MaxBuffered = comm.DefaultMaxBuffered
	}
	if err := initMPI(); err != nil {
		return nil, err
	}
	var c, pc C.MPI_Comm
	var rank, size, ub C.int
	if err := mpiErr("MPI_Comm_dup(MPI_COMM_WORLD)", C.t_world(&c, &pc, &rank, &size, &ub)); err != nil {
		return nil, err
	}
	global := make([]int, int(size))
	for i := range global {
		global[i] = i
	}
	return newGroup(cfg, c, pc, int(rank), global, int(ub), &family{}), nil
}

func newGroup(cfg Config, c, pc C.MPI_Comm, rank int, global []int, tagUB int, f *family) *group {
	g := &group{family: f, cfg: cfg, c: c, pc: pc, rank: rank, size: len(global), global: global, tagUB: tagUB,
		q: comm.NewQueue(), closed: make(chan struct{}), polled: make(chan struct{}), resume: make(chan struct{}, 1)}
	g.p2p.init()
	f.add(g)
	go g.progress()
	return g
}

func (g *group) Rank() int          { return g.rank }
func (g *group) Size() int          { return g.size }
func (g *group) GlobalRanks() []int { return append([]int(nil), g.global...) }

// NewGroup makes a communicator over ranks with MPI_Comm_create_group, whose
// tag is a hash of name; see the package documentation.
func (g *group) NewGroup(name string, ranks []int) (comm.Group, error) {
	return g.NewGroupConfig(name, ranks, g.cfg)
}

// NewGroupConfig is NewGroup with its own Config (a subgroup with a shorter
// deadline or a smaller buffer bound).
func (g *group) NewGroupConfig(name string, ranks []int, cfg Config) (comm.Group, error) {
	me, err := comm.CheckNewGroup(name, ranks, g.rank, g.size)
	if err != nil {
		return nil, err
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxBuffered <= 0 {
		cfg.MaxBuffered = comm.DefaultMaxBuffered
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	tag := int(h.Sum32()) % g.tagUB
	cr := make([]C.int, len(ranks))
	global := make([]int, len(ranks))
	for i, r := range ranks {
		cr[i] = C.int(r)
		global[i] = g.global[r]
	}
	type result struct {
		c, pc C.MPI_Comm
		err   error
	}
	done := make(chan result, 1)
	go func() {
		var c, pc C.MPI_Comm
		err := mpiErr("MPI_Comm_create_group", C.t_sub(g.c, &cr[0], C.int(len(cr)), C.int(tag), &c, &pc))
		done <- result{c, pc, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, fmt.Errorf("comm/mpi: newgroup %q: %w", name, r.err)
		}
		return newGroup(cfg, r.c, r.pc, me, global, g.tagUB, g.family), nil
	case <-time.After(cfg.Timeout):
		return nil, &comm.PeerError{Rank: -1, Op: "newgroup " + name,
			Err: fmt.Errorf("%w: not every rank of %v called NewGroup within %v (MPI does not say which)", comm.ErrTimeout, global, cfg.Timeout)}
	}
}

// Stats reports the queue's accounting and the bytes buffered now.
func (g *group) Stats() comm.Stats {
	g.p2p.drain(g) // count messages that have arrived by now
	s := g.q.Stats()
	s.Buffered = g.p2p.bufferedBytes()
	return s
}

// Close fails pending work (collectives, posted receives and sends in
// flight) and stops the progress goroutine. The communicator is not freed
// (MPI_Comm_free may need its peers).
func (g *group) Close() error {
	g.once.Do(func() {
		close(g.closed)
		g.q.Close()
		<-g.polled
		g.p2p.failAll(comm.ErrClosed)
		g.p2p.abandon(g, comm.ErrClosed)
	})
	return nil
}

// leak keeps p pinned for the life of the process: MPI may still write
// into its memory.
func (g *group) leak(p *runtime.Pinner) {
	g.mu.Lock()
	g.leaked = append(g.leaked, p)
	g.mu.Unlock()
}

// timeoutErr is the error of an operation that passed its deadline.
func (g *group) timeoutErr(op string, peer int) error {
	rank := -1
	who := "a peer (MPI does not say which)"
	if peer >= 0 {
		rank = g.global[peer]
		who = fmt.Sprintf("rank %d", rank)
	}
	return &comm.PeerError{Rank: rank, Op: op,
		Err: fmt.Errorf("%w: %s did not complete it within %v", comm.ErrTimeout, who, g.cfg.Timeout)}
}

// wait polls r until it completes, the group closes or breaks, or the
// deadline passes; pin is unpinned once MPI is done with the memory, or
// leaked if it may never be.
func (g *group) wait(r *request, op string, pin *runtime.Pinner) error {
	g.waiting.Add(1)
	defer func() {
		if g.waiting.Add(-1) == 0 {
			select {
			case g.resume <- struct{}{}:
			default:
			}
		}
	}()
	deadline := time.Now().Add(g.cfg.Timeout)
	drained := time.Now()
	for {
		done, err := test(r)
		if done || err != nil {
			pin.Unpin()
			return err
		}
		var stop error
		select {
		case <-g.closed:
			stop = comm.ErrClosed
		default:
			if err := g.q.Err(); err != nil {
				stop = err
			} else if time.Now().After(deadline) {
				stop = g.timeoutErr(op, -1)
			}
		}
		if stop != nil {
			g.leak(pin)
			return stop
		}
		if now := time.Now(); now.Sub(drained) >= drainEvery {
			g.p2p.drain(g) // the progress goroutine sleeps meanwhile
			drained = now
		}
		// MPI's non-blocking collectives advance mostly inside MPI_Test
		// (libnbc runs one round of its schedule per call): poll without
		// sleeping, yielding to the rank's other goroutines.
		runtime.Gosched()
	}
}

// drainEvery is how often a collective's waiter drains point-to-point
// traffic in the progress goroutine's stead.
const drainEvery = 200 * time.Microsecond

// backoff yields for the first polls, then sleeps doubling naps up to max.
func backoff(i int, nap, max time.Duration) time.Duration {
	if i < 64 {
		runtime.Gosched()
		return 0
	}
	nap = min(max, 2*nap+5*time.Microsecond)
	time.Sleep(nap)
	return nap
}

// bytesOf is the memory of b as bytes.
func bytesOf(b comm.Buf) []byte {
	if f := b.Float32s(); len(f) > 0 {
		return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 4*len(f))
	}
	if h := b.BFloat16s(); len(h) > 0 {
		return unsafe.Slice((*byte)(unsafe.Pointer(&h[0])), 2*len(h))
	}
	return nil
}

// pinned pins the memory of every slice given.
func pinned(bs ...[]byte) *runtime.Pinner {
	p := new(runtime.Pinner)
	for _, b := range bs {
		if len(b) > 0 {
			p.Pin(&b[0])
		}
	}
	return p
}

// checkCount refuses payloads MPI's int counts cannot describe.
func checkCount(op string, bytes int) error {
	if bytes > 1<<31-1 {
		return fmt.Errorf("%w: %s: %d bytes exceed MPI's int count (2^31-1)", comm.ErrArgs, op, bytes)
	}
	return nil
}
