package shm

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"trellis/comm"
)

// world is one rank's view of a shared-memory world: the world segment
// (which also carries every rank's doorbell), the liveness of the ranks'
// processes, the groups open on this rank, and the drainer goroutine that
// moves point-to-point messages out of the rings.
type world struct {
	cfg   Config
	me    int
	seg   *segment
	pid   int
	pids  []int // by rank
	fds   []int // pidfds by rank (-1: none: this process, or pidfd unsupported)
	bell  event // this rank's doorbell
	stop  chan struct{}
	done  chan struct{} // closed when the drainer has stopped
	p2p   sync.WaitGroup
	mu    sync.Mutex
	open  []*group       // groups whose rings the drainer watches
	made  map[string]int // groups made per key, to number their instances
	segs  []*segment     // every segment mapped, unmapped at close
	close sync.Once
	spin  atomic.Int64 // the spin budget of waits, in ns (see spun)
}

// New joins the world cfg describes and returns its world group. Rank 0
// creates the world segment (removing a stale one of the same name); every
// rank maps it and claims its slot; New returns once every rank has, or
// fails after RendezvousTimeout naming the ranks that never attached. The
// segment file is then removed (the mappings keep the memory until the
// last rank exits), so a job leaves nothing in Dir however it ends, except
// when a rank dies before every rank attached: a launcher removes those
// with RemoveSegments.
func New(cfg Config) (comm.Group, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	w := &world{cfg: cfg, me: cfg.Rank, pid: os.Getpid(), made: map[string]int{},
		stop: make(chan struct{}), done: make(chan struct{})}
	w.spin.Store(int64(cfg.Spin))
	l := newLayout(cfg.Size, cfg.SliceBytes, cfg.Depth, cfg.RingBytes)
	seg, err := w.rendezvous(l)
	if err != nil {
		return nil, err
	}
	w.seg = seg
	w.segs = append(w.segs, seg)
	// Rank 0's slices, depth and rings are the world's: every group uses them.
	w.cfg.SliceBytes, w.cfg.Depth, w.cfg.RingBytes = seg.l.slice, seg.l.depth, seg.l.ring
	l = seg.l
	w.bell = seg.m.event(l.member(w.me) + mBell)
	w.pids = make([]int, cfg.Size)
	w.fds = make([]int, cfg.Size)
	for r := range w.pids {
		w.pids[r] = int(seg.m.u32(l.member(r) + mPid).Load())
		w.fds[r] = -1
		if w.pids[r] != w.pid {
			if fd, err := unix.PidfdOpen(w.pids[r], 0); err == nil {
				w.fds[r] = fd
			}
		}
	}
	g := w.newGroup("world", seg, identity(cfg.Size), w.me)
	go w.drain()
	return g, nil
}

func identity(n int) []int {
	r := make([]int, n)
	for i := range r {
		r[i] = i
	}
	return r
}

// rendezvous creates (rank 0) or finds the world segment, claims this
// rank's slot and waits for every rank's.
func (w *world) rendezvous(l layout) (*segment, error) {
	c := w.cfg
	path := filepath.Join(c.Dir, c.Name+"-world")
	deadline := time.Now().Add(c.RendezvousTimeout)
	var seg *segment
	for seg == nil {
		var err error
		if w.me == 0 {
			os.Remove(path) // a stale world of a job that died before attaching
			seg, err = createSegment(c.Dir, c.Name+"-world", l, randomNonce())
			if err != nil && !errors.Is(err, errExists) {
				return nil, err
			}
		} else {
			seg, err = openSegment(path)
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, err
			}
			if seg != nil && seg.l.p != l.p {
				seg.unmap()
				return nil, fmt.Errorf("shm: %s is a world of %d ranks; this rank expects %d", path, seg.l.p, l.p)
			}
		}
		if seg == nil {
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("shm: rank %d: %s did not appear within %v (rank 0 creates it)", w.me, path, c.RendezvousTimeout)
			}
			time.Sleep(time.Millisecond)
			continue
		}
		if !seg.m.u32(l.member(w.me)+mPid).CompareAndSwap(0, uint32(w.pid)) {
			// A slot already taken: a stale segment that rank 0 will replace.
			seg.unmap()
			seg = nil
			time.Sleep(time.Millisecond)
			continue
		}
		seg.m.u32(l.member(w.me) + mState).Store(stateAttached)
		seg.m.u32(hAttached).Add(1)
		if err := w.awaitAttached(seg, deadline); err != nil {
			if errors.Is(err, errStale) {
				seg.unmap()
				seg = nil
				continue
			}
			seg.unmap()
			return nil, err
		}
	}
	if w.me == 0 {
		seg.unlink()
	}
	return seg, nil
}

var errStale = errors.New("shm: stale world segment")

// awaitAttached waits until every rank has claimed its slot of seg; a
// rank other than 0 also watches for rank 0 replacing a stale file. Rank
// 0 unlinks the file once every slot is claimed, so a file gone while the
// last ranks attached is a complete world, not a stale one: the slots are
// read again before leaving it (a rank that left it then, its slot
// claimed, waited out the rendezvous timeout for a file that never came
// back while the others ran its collectives: a CI run's 5 minutes).
func (w *world) awaitAttached(seg *segment, deadline time.Time) error {
	absent := func() []int {
		var out []int
		for r := 0; r < seg.l.p; r++ {
			if seg.m.u32(seg.l.member(r)+mPid).Load() == 0 {
				out = append(out, w.cfg.WorldRanks[r])
			}
		}
		return out
	}
	for i := 0; ; i++ {
		missing := absent()
		if len(missing) == 0 {
			return nil
		}
		if w.me != 0 && i%16 == 0 && seg.replaced() {
			if len(absent()) == 0 {
				return nil
			}
			return errStale
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("shm: rendezvous: world ranks %v never attached to %s within %v", missing, seg.path, w.cfg.RendezvousTimeout)
		}
		time.Sleep(time.Millisecond)
	}
}

func randomNonce() uint64 {
	var b [8]byte
	rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}

// alive is nil while rank r's process runs, else an error saying it died.
func (w *world) alive(r int) error {
	if w.cfg.alive != nil && !w.cfg.alive(r) {
		return fmt.Errorf("rank crashed (test)")
	}
	if r == w.me || w.pids[r] == w.pid {
		return nil
	}
	if fd := w.fds[r]; fd >= 0 {
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if n, err := unix.Poll(p, 0); err == nil && n > 0 {
			return fmt.Errorf("its process %d died", w.pids[r])
		}
		return nil
	}
	if err := unix.Kill(w.pids[r], 0); errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("its process %d died", w.pids[r])
	}
	return nil
}

// register adds g to the groups the drainer watches and the segments
// unmapped at close.
func (w *world) register(g *group) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.open = append(w.open, g)
	if g.seg != w.seg {
		w.segs = append(w.segs, g.seg)
	}
}

func (w *world) unregister(g *group) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, o := range w.open {
		if o == g {
			w.open = append(w.open[:i:i], w.open[i+1:]...)
			break
		}
	}
}

func (w *world) groups() []*group {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]*group(nil), w.open...)
}

// shutdown stops the drainer, waits for the point-to-point goroutines and
// unmaps every segment. Called by the world group's Close after every
// group is closed.
func (w *world) shutdown() {
	w.close.Do(func() {
		close(w.stop)
		w.bell.store(w.bell.v.Load() + 1)
		<-w.done
		w.p2p.Wait()
		for _, fd := range w.fds {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, s := range w.segs {
			s.unmap()
		}
	})
}

// drain is the drainer: it moves the messages arriving in this rank's
// rings into their posted receives or the mailbox, and fails the receives
// whose senders died or stayed silent too long. It sleeps on the doorbell
// that senders ring, waking at least every 20 ms while receives are posted
// (to check their senders and deadlines) and every 200 ms otherwise.
func (w *world) drain() {
	defer close(w.done)
	for {
		seen := w.bell.v.Load()
		select {
		case <-w.stop:
			return
		default:
		}
		moved, waiting := false, false
		for _, g := range w.groups() {
			m, p, _ := g.in.poll(g)
			moved, waiting = moved || m, waiting || p
		}
		if moved {
			continue
		}
		nap := 200 * time.Millisecond
		if waiting {
			nap = 20 * time.Millisecond
		}
		w.bell.zz.Add(1)
		if w.bell.v.Load() == seen {
			sleepOn(w.bell.v, seen, nap)
		}
		w.bell.zz.Add(^uint32(0))
	}
}
