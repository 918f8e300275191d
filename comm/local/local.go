package local

import (
	"fmt"
	"runtime"
	"sync"
	"time"

	"trellis/comm"
)

// DefaultTimeout is the deadline of a barrier or a Recv when Config.Timeout
// is zero.
const DefaultTimeout = 30 * time.Second

// Config describes a world of goroutine ranks.
type Config struct {
	Size int // number of ranks, at least 1
	// Timeout bounds every wait for peers; 0 means DefaultTimeout.
	Timeout time.Duration
	// Link, if set, emulates a network (see the package documentation).
	Link *LinkModel
	// MaxBuffered bounds the bytes of messages a member holds, per group,
	// for Recvs it has not posted yet; a Send beyond it breaks the group
	// with comm.ErrBufferFull. 0 means comm.DefaultMaxBuffered.
	MaxBuffered int64
	// Poll is how long a member waiting at a collective's barrier, or in
	// a Wait on a Send or Recv, polls before it blocks (comm.Queue.SetPoll);
	// 0: it blocks at once. Worth it only where every rank's goroutines
	// have cores of their own: a blocked goroutine is woken on its
	// waker's core, and its own idle core, asleep, takes longer to wake
	// than a short step lasts.
	Poll time.Duration
}

// Validate checks the size, the timeout and the link model.
func (c Config) Validate() error {
	if c.Size < 1 {
		return fmt.Errorf("local: Size=%d: a world needs at least 1 rank", c.Size)
	}
	if c.Timeout < 0 {
		return fmt.Errorf("local: Timeout=%v must not be negative", c.Timeout)
	}
	if c.Poll < 0 {
		return fmt.Errorf("local: Poll=%v must not be negative", c.Poll)
	}
	if c.MaxBuffered < 0 {
		return fmt.Errorf("local: MaxBuffered=%d must not be negative", c.MaxBuffered)
	}
	if c.Link != nil {
		if err := c.Link.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// PollFor is Config.Poll for a world whose ranks run threads kernel
// threads in all on cores cores: 100 µs where the threads do not
// outnumber the cores, none where they do (a poller would take a core
// another rank needs). Against blocking at once, on two vCPUs
// (docs/BENCHMARKS.md, "Waits that poll"): tensor parallelism's step 13%
// faster (its all-reduces' exposed part 3.7 → 1.45 ms a step), with
// sequence parallelism 24%, and context parallelism's ring no longer
// runs its two ranks in turn on one core. 100 µs is about a sleeping
// vCPU's wake-up (100–150 µs there), so fewer polls run out than at
// 50 µs: the tp, sp and cp steps were 4–5% faster again, as fast as at
// 200 µs; 1 ms made ZeRO-3's step 10% slower (its prefetching queue's
// polls take the core its rank computes on).
func PollFor(threads, cores int) time.Duration {
	if threads > cores {
		return 0
	}
	return 100 * time.Microsecond
}

// New starts a world of cfg.Size ranks and returns each rank's world group:
// rank i uses groups[i], from its own goroutines only.
func New(cfg Config) ([]comm.Group, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxBuffered == 0 {
		cfg.MaxBuffered = comm.DefaultMaxBuffered
	}
	w := &world{cfg: cfg, teams: map[string]*team{}, made: map[string]int{}, ports: map[[2]int]time.Time{},
		crowd: comm.NewCrowding(cfg.Size, min(runtime.GOMAXPROCS(0), runtime.NumCPU()))}
	ranks := make([]int, cfg.Size)
	for i := range ranks {
		ranks[i] = i
	}
	groups := make([]comm.Group, cfg.Size)
	for i := range groups {
		t := w.join("world", ranks, i)
		groups[i] = newGroup(w, t, i)
	}
	return groups, nil
}

// world is the state the ranks of one New share: the registry of groups.
type world struct {
	cfg   Config
	mu    sync.Mutex
	teams map[string]*team // instance key → shared state of a group
	made  map[string]int   // "worldRank key" → groups made with that key so far

	portMu sync.Mutex
	ports  map[[2]int]time.Time // LinkModel.SharedPorts: when the link from world rank a to b is free

	crowd *comm.Crowding // every rank is in this process: nil unless they outnumber its cores
}

// join returns the shared state of the group with this key and members
// (world ranks) for world rank me. The k-th group a rank makes with a key is
// the same group as every other member's k-th, so a key can be reused after
// its groups are closed.
func (w *world) join(key string, members []int, me int) *team {
	w.mu.Lock()
	defer w.mu.Unlock()
	mk := fmt.Sprintf("%d %s", me, key)
	inst := fmt.Sprintf("%s#%d", key, w.made[mk])
	w.made[mk]++
	t := w.teams[inst]
	if t == nil {
		t = newTeam(inst, members)
		t.poll = w.cfg.Poll
		w.teams[inst] = t
	}
	return t
}

// leave records that one member closed its group; the last one removes the
// group from the registry.
func (w *world) leave(t *team) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t.left++
	if t.left == len(t.ranks) {
		delete(w.teams, t.key)
	}
}
