// Package world opens a process's communication world by backend name, so
// that a program (cmd/trellis) names a backend and never a transport:
//
//	w, err := world.Open("auto", world.Config{Placement: &p})
//	defer w.Close()
//	train.Run(ctx, train.Options{World: w.Group, ...})
//
// The backends are a fixed table (Backends); each is a function of the
// Config, and nothing here is package state. Placement is where this
// process sits, as its launcher said (package launch reads it from
// torchrun-style, Slurm or Open MPI variables); the environment (Lookup)
// supplies the job token, timeouts and the shared-memory world's name.
//
//	local  ranks are goroutines of this process: Group is nil
//	tcp    one process per rank, comm/tcp over the job's network
//	shm    one process per rank, every rank on this host: comm/shm
//	mpi    one process per rank under mpirun or srun: comm/mpi (a binary
//	       built with -tags mpi; without it Open says so)
//	auto   without a launcher, local; with one, comm/tcp for the
//	       rendezvous and then, when every host's /dev/shm is usable,
//	       comm/shm inside each host: a job on one host is a comm/shm
//	       world, one across hosts a comm/hier world (shared memory inside
//	       a host, TCP between hosts). When any rank's shared memory is
//	       unusable the job stays on comm/tcp, and that rank logs a
//	       warning naming why.
package world

import (
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"

	"trellis/comm"
)

// Placement is where this process sits in its job.
type Placement struct {
	Rank, Size           int // world rank and world size
	LocalRank, LocalSize int // rank within this host and ranks on this host
	NodeRank             int // this host
	MasterAddr           string
	MasterPort           int
	Source               string // the launcher: "torchrun", "slurm", "openmpi"
}

// Config is what Open needs besides the backend's name.
type Config struct {
	// Placement is this process's place in the job; nil when no launcher
	// started it (Unplaced then says why, for the error of a backend that
	// needs one).
	Placement *Placement
	Unplaced  error
	// Lookup reads the environment: the job token, TRELLIS_COMM_* timeouts
	// and bounds, the shared-memory world's name and directory. Default
	// os.LookupEnv.
	Lookup func(string) (string, bool)
	// Log receives auto's fallback warning. Default slog.Default().
	Log *slog.Logger
}

func (c Config) lookup(k string) string {
	f := c.Lookup
	if f == nil {
		f = os.LookupEnv
	}
	v, _ := f(k)
	return strings.TrimSpace(v)
}

func (c Config) log() *slog.Logger {
	if c.Log == nil {
		return slog.Default()
	}
	return c.Log
}

// World is an opened world.
type World struct {
	// Group is this process's world group; nil for local, whose ranks are
	// goroutines of this process.
	Group comm.Group
	// Backend is what was opened: local, tcp, shm, mpi, or hier (auto
	// across hosts).
	Backend string
	close   func() error
}

// Close leaves the world (for mpi it also finalizes MPI).
func (w *World) Close() error {
	if w == nil || w.close == nil {
		return nil
	}
	return w.close()
}

// backend is one row of the table.
type backend struct {
	name, about string
	open        func(Config) (*World, error)
}

// table is every backend Open knows, in the order help text lists them.
func table() []backend {
	return []backend{
		{"auto", "processes under a launcher (shared memory inside a host, TCP between hosts; TCP where /dev/shm is unusable), else goroutines", openAuto},
		{"local", "goroutines of one process", openLocal},
		{"tcp", "processes, TCP between every pair", openTCP},
		{"shm", "processes of one host, shared memory", openShm},
		{"mpi", "processes under mpirun/srun; a binary built with -tags mpi", openMPI},
	}
}

// Backends lists the names Open accepts.
func Backends() []string {
	var out []string
	for _, b := range table() {
		out = append(out, b.name)
	}
	return out
}

// Help is one line per backend, "name: what it is", for flag help.
func Help() string {
	var parts []string
	for _, b := range table() {
		parts = append(parts, b.name+" ("+b.about+")")
	}
	return strings.Join(parts, ", ")
}

// Open joins the world of the named backend.
func Open(name string, cfg Config) (*World, error) {
	i := slices.IndexFunc(table(), func(b backend) bool { return b.name == name })
	if i < 0 {
		return nil, fmt.Errorf("world: backend %q: want one of %s", name, strings.Join(Backends(), ", "))
	}
	return table()[i].open(cfg)
}

// needPlacement is the error of a process backend without a launcher.
func needPlacement(name string, cfg Config) error {
	if cfg.Placement != nil {
		return nil
	}
	why := cfg.Unplaced
	if why == nil {
		why = fmt.Errorf("no launcher environment")
	}
	return fmt.Errorf("backend %s: %w (start it with trellis launch, torchrun-style variables, Slurm or Open MPI)", name, why)
}

func openLocal(Config) (*World, error) { return &World{Backend: "local"}, nil }

func opened(g comm.Group, backend string) *World {
	return &World{Group: g, Backend: backend, close: g.Close}
}
