package shm

import (
	"fmt"
	"runtime"
	"time"

	"trellis/comm"
)

// Defaults for Config's zero values.
const (
	DefaultDir               = "/dev/shm"
	DefaultTimeout           = 10 * time.Minute
	DefaultRendezvousTimeout = 5 * time.Minute
	DefaultSliceBytes        = 1 << 20
	DefaultDepth             = 3
	DefaultRingBytes         = 256 << 10
)

// Environment variables a launcher sets for the workers of one host (see
// launch): the world's name, unique per job attempt and host, and the
// directory its segments live in.
const (
	EnvName = "TRELLIS_SHM_NAME"
	EnvDir  = "TRELLIS_SHM_DIR"
)

// Tuning variables (comm/world reads them into Config; every rank of a
// host must agree): SliceBytes, Depth and Spin.
const (
	EnvSliceBytes = "TRELLIS_SHM_SLICE_BYTES"
	EnvDepth      = "TRELLIS_SHM_DEPTH"
	EnvSpin       = "TRELLIS_SHM_SPIN"
)

// Config describes one rank of a shared-memory world: the processes (or,
// in tests, goroutines) of one host that share Dir.
type Config struct {
	Rank int // this rank, 0 ≤ Rank < Size
	Size int // ranks in the world
	// Name names the world's segment files, Dir/Name-world and
	// Dir/Name-<nonce>-<group>: the same on every rank of the world and
	// unique per job attempt (a launcher passes it in EnvName). Up to 100
	// characters of [A-Za-z0-9._-].
	Name string
	// Dir is where segments live; default /dev/shm.
	Dir string
	// WorldRanks, if set, is the world rank of each rank of this world
	// (len Size), for a world that is one host of a larger job: errors name
	// those ranks and GlobalRanks reports them. Default: 0..Size-1.
	WorldRanks []int
	// Timeout bounds every wait for a peer that is alive (a dead process is
	// noticed within milliseconds); past it the operation fails with a
	// *comm.PeerError naming the peer (comm.ErrTimeout). Default 10 min.
	Timeout time.Duration
	// RendezvousTimeout bounds how long New waits for every rank to attach.
	// Default 5 min.
	RendezvousTimeout time.Duration
	// MaxBuffered bounds the bytes of messages a rank holds, per group, for
	// receives it has not posted; default comm.DefaultMaxBuffered.
	MaxBuffered int64
	// SliceBytes is the staging slot each rank has per group and pipeline
	// step (collectives move data in slices of this size), Depth the number
	// of slots (at least 3: a slice's slot is read two rounds after it is
	// written), RingBytes the capacity of each point-to-point ring.
	// Defaults: slices of 1 MiB, or 4 MiB when the world has more ranks
	// than this host has CPUs (fewer rounds, so fewer hand-overs of a core
	// between the ranks that share it); 3; 256 KiB. Rank 0's values are the
	// world's (the others adopt them from its segment).
	SliceBytes, Depth, RingBytes int
	// Spin bounds how long a waiter polls before it sleeps on a futex (the
	// budget adapts below it: see the package doc). Default: 50 µs when
	// the world has no more ranks than this host has CPUs, else 5 µs (a
	// spinning rank would take the core the awaited one needs).
	Spin time.Duration

	alive func(rank int) bool // tests: a crashed rank, as liveness would find it
}

// Validate names the first field that breaks its rule.
func (c Config) Validate() error {
	switch {
	case c.Size < 1:
		return fmt.Errorf("shm: Size=%d: must be at least 1", c.Size)
	case c.Rank < 0 || c.Rank >= c.Size:
		return fmt.Errorf("shm: Rank=%d: must be in [0, Size=%d)", c.Rank, c.Size)
	case c.WorldRanks != nil && len(c.WorldRanks) != c.Size:
		return fmt.Errorf("shm: WorldRanks has %d entries for Size=%d", len(c.WorldRanks), c.Size)
	case c.Timeout < 0 || c.RendezvousTimeout < 0 || c.Spin < 0:
		return fmt.Errorf("shm: Timeout=%v, RendezvousTimeout=%v, Spin=%v: must not be negative", c.Timeout, c.RendezvousTimeout, c.Spin)
	case c.MaxBuffered < 0:
		return fmt.Errorf("shm: MaxBuffered=%d: must not be negative", c.MaxBuffered)
	case c.SliceBytes != 0 && (c.SliceBytes < pageSize || c.SliceBytes%pageSize != 0 || c.SliceBytes > 1<<30):
		return fmt.Errorf("shm: SliceBytes=%d: must be a multiple of %d in [%d, 1 GiB]", c.SliceBytes, pageSize, pageSize)
	case c.Depth != 0 && (c.Depth < 3 || c.Depth > 8):
		return fmt.Errorf("shm: Depth=%d: must be in [3, 8] (0: %d)", c.Depth, DefaultDepth)
	case c.RingBytes != 0 && (c.RingBytes < pageSize || c.RingBytes%pageSize != 0 || c.RingBytes > 1<<30):
		return fmt.Errorf("shm: RingBytes=%d: must be a multiple of %d in [%d, 1 GiB]", c.RingBytes, pageSize, pageSize)
	}
	return checkName(c.Name)
}

// checkName holds a world name to the characters a file name may safely
// have.
func checkName(name string) error {
	if name == "" || len(name) > 100 {
		return fmt.Errorf("shm: Name=%q: must be 1 to 100 characters (a launcher sets %s)", name, EnvName)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("shm: Name=%q: only letters, digits, '.', '_' and '-' are allowed", name)
		}
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Dir == "" {
		c.Dir = DefaultDir
	}
	if c.WorldRanks == nil {
		c.WorldRanks = make([]int, c.Size)
		for i := range c.WorldRanks {
			c.WorldRanks[i] = i
		}
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.RendezvousTimeout == 0 {
		c.RendezvousTimeout = DefaultRendezvousTimeout
	}
	if c.MaxBuffered == 0 {
		c.MaxBuffered = comm.DefaultMaxBuffered
	}
	if c.SliceBytes == 0 {
		c.SliceBytes = DefaultSliceBytes
		if c.Size > runtime.NumCPU() {
			c.SliceBytes = 4 * DefaultSliceBytes
		}
	}
	if c.Depth == 0 {
		c.Depth = DefaultDepth
	}
	if c.RingBytes == 0 {
		c.RingBytes = DefaultRingBytes
	}
	if c.Spin == 0 {
		c.Spin = 5 * time.Microsecond
		if c.Size <= runtime.NumCPU() {
			c.Spin = 50 * time.Microsecond
		}
	}
	return c
}

// SegmentBytes is the size of one group's segment of p ranks under cfg's
// (default) slice, depth and ring sizes: what a host's /dev/shm must hold
// per group.
func SegmentBytes(cfg Config, p int) int64 {
	c := cfg.withDefaults()
	return int64(newLayout(p, c.SliceBytes, c.Depth, c.RingBytes).total)
}
