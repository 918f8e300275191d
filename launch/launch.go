// Package launch starts one worker process per rank, torchrun-style, and
// tells each where it sits (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// NODE_RANK, MASTER_ADDR, MASTER_PORT and the job token); it also reads that
// placement back in a worker, from its own launcher or from Slurm or Open MPI
// (ParseEnv).
//
// A job's workers share the launcher's stdout and stderr, each line prefixed
// with "[rank R] ". When a worker fails (a non-zero exit or a signal), the
// others get StopGrace to exit on their own — a comm/tcp worker notices the
// dead peer within its timeout and exits with an error naming it — then
// SIGTERM, then, after another StopGrace, SIGKILL; Wait then reports the
// first failure: its rank, exit status and last lines. Cancelling the
// context (Ctrl-C) sends every worker one SIGINT at once (trellis train then
// stops after its current step and checkpoints), and SIGTERM only after
// InterruptGrace; Abort kills them at once (a second Ctrl-C).
package launch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"trellis/comm/tcp"
	"trellis/internal/checked"
)

// Defaults for zero Config fields.
const (
	DefaultStopGrace      = 5 * time.Second
	DefaultInterruptGrace = 5 * time.Minute
	DefaultTailLines      = 20
	// DefaultMaxProcs caps --nproc-per-node (MaxProcs): a node has at most
	// a few hundred cores or a handful of accelerators; 99999 workers
	// would fork for a minute before the first fails. Raise it with
	// --max-nproc-per-node.
	DefaultMaxProcs = 1024
	// DefaultMaxLine caps one line of a worker's output (MaxLine): longer
	// lines are cut, saying how many bytes were dropped, so that a worker
	// writing a 200 MB line costs the launcher no more than this.
	DefaultMaxLine = 64 << 10
	// MaxWorld bounds the job's workers, --nnodes × --nproc-per-node.
	MaxWorld = 1 << 20
	// tailLineBytes caps each of the last lines a failure report repeats.
	tailLineBytes = 2 << 10
)

// Config describes the workers of one node. The fields are trellis
// launch's flags, and Validate's errors name them so.
type Config struct {
	NProcPerNode int // --nproc-per-node: workers on this node
	NNodes       int // --nnodes: nodes in the job (0 means 1)
	NodeRank     int // --node-rank: this node, 0 ≤ NodeRank < NNodes
	// MaxProcs (--max-nproc-per-node) caps NProcPerNode; 0 means
	// DefaultMaxProcs.
	MaxProcs int
	// MaxLine caps one line of a worker's output, in bytes; 0 means
	// DefaultMaxLine.
	MaxLine int

	// MasterAddr and MasterPort locate rank 0's rendezvous store. On one
	// node they default to 127.0.0.1 and a free port; several nodes must
	// name a host every node reaches, and the port defaults to 29500.
	MasterAddr string
	MasterPort int
	// Token authenticates the job's connections. On one node a random one
	// is generated when empty; several nodes must share one (a file or the
	// TRELLIS_JOB_TOKEN variable; see docs/LAUNCH.md).
	Token string

	Program string   // the worker executable
	Args    []string // its arguments
	Env     []string // extra KEY=VALUE entries for every worker

	Stdout, Stderr io.Writer     // where prefixed worker output goes (default os.Stdout, os.Stderr)
	StopGrace      time.Duration // see the package doc; default 5 s
	// InterruptGrace is how long workers may take to stop after the
	// forwarded SIGINT (finishing a step, writing a checkpoint) before
	// SIGTERM; default 5 min.
	InterruptGrace time.Duration
	TailLines      int // lines kept per worker for the failure report; default 20
	// Watch, when set, sees every line a worker writes (without the
	// prefix), from the goroutine copying that worker's output.
	Watch func(rank int, line string)
}

// Validate names the first flag that breaks its rule. It runs before
// anything is allocated or started.
func (c Config) Validate() error {
	if err := c.checkCounts(); err != nil {
		return err
	}
	nn := max(c.NNodes, 1)
	switch {
	case c.NodeRank < 0 || c.NodeRank >= nn:
		return fmt.Errorf("launch: --node-rank=%d: must be in [0, --nnodes=%d)", c.NodeRank, nn)
	case c.MasterPort < 0 || c.MasterPort > 65535:
		return fmt.Errorf("launch: --master-port=%d: must be in [0, 65535]", c.MasterPort)
	case nn > 1 && c.MasterAddr == "":
		return fmt.Errorf("launch: --master-addr is empty: a job of %d nodes needs the host of node 0", nn)
	case nn > 1 && c.Token == "":
		return fmt.Errorf("launch: no job token: the %d nodes of a job must share one (set %s or pass --token-file)", nn, tcp.EnvToken)
	case c.Program == "":
		return fmt.Errorf("launch: no program: give it after --")
	case c.StopGrace < 0:
		return fmt.Errorf("launch: --stop-grace=%v: must not be negative", c.StopGrace)
	case c.InterruptGrace < 0:
		return fmt.Errorf("launch: --interrupt-grace=%v: must not be negative", c.InterruptGrace)
	case c.TailLines < 0:
		return fmt.Errorf("launch: TailLines=%d (the lines a failure report repeats): must not be negative", c.TailLines)
	case c.MaxLine < 0:
		return fmt.Errorf("launch: MaxLine=%d (bytes of one output line): must not be negative", c.MaxLine)
	}
	return nil
}

// checkCounts checks the counts anything is sized by: the workers of this
// node (at most MaxProcs) and of the job (a checked product).
func (c Config) checkCounts() error {
	nn := max(c.NNodes, 1)
	maxProcs := c.MaxProcs
	if maxProcs == 0 {
		maxProcs = DefaultMaxProcs
	}
	world, ok := checked.Ints(nn, c.NProcPerNode)
	switch {
	case c.MaxProcs < 0:
		return fmt.Errorf("launch: --max-nproc-per-node=%d: must be at least 1 (0: the default, %d)", c.MaxProcs, DefaultMaxProcs)
	case c.NProcPerNode < 1:
		return fmt.Errorf("launch: --nproc-per-node=%d: must be at least 1", c.NProcPerNode)
	case c.NProcPerNode > maxProcs:
		return fmt.Errorf("launch: --nproc-per-node=%d: more than %d workers on one node (raise --max-nproc-per-node if this node really runs that many)", c.NProcPerNode, maxProcs)
	case c.NNodes < 0:
		return fmt.Errorf("launch: --nnodes=%d: must be at least 1", c.NNodes)
	case !ok || world > MaxWorld:
		return fmt.Errorf("launch: --nnodes=%d × --nproc-per-node=%d: more than %d workers in the job", nn, c.NProcPerNode, MaxWorld)
	}
	return nil
}

// resolve fills the defaults: master, free port, token, writers.
func (c Config) resolve() (Config, error) {
	c.NNodes = max(c.NNodes, 1)
	if c.MasterAddr == "" {
		c.MasterAddr = "127.0.0.1"
	}
	if c.MasterPort == 0 && c.NNodes > 1 {
		c.MasterPort = DefaultMasterPort
	}
	if c.MasterPort == 0 {
		p, err := freePort(c.MasterAddr)
		if err != nil {
			return c, err
		}
		c.MasterPort = p
	}
	if c.Token == "" {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return c, fmt.Errorf("launch: job token: %w", err)
		}
		c.Token = hex.EncodeToString(b)
	}
	if c.Stdout == nil {
		c.Stdout = os.Stdout
	}
	if c.Stderr == nil {
		c.Stderr = os.Stderr
	}
	if c.StopGrace == 0 {
		c.StopGrace = DefaultStopGrace
	}
	if c.InterruptGrace == 0 {
		c.InterruptGrace = DefaultInterruptGrace
	}
	if c.TailLines == 0 {
		c.TailLines = DefaultTailLines
	}
	if c.MaxLine == 0 {
		c.MaxLine = DefaultMaxLine
	}
	return c, nil
}

// freePort asks the kernel for a port that is free on host now.
func freePort(host string) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("launch: find a free port on %s: %w", host, err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// workerEnv is the environment of local rank lr.
func (c Config) workerEnv(lr int) []string {
	rank := c.NodeRank*c.NProcPerNode + lr
	env := append(os.Environ(), c.Env...)
	return append(env,
		"RANK="+strconv.Itoa(rank),
		"WORLD_SIZE="+strconv.Itoa(c.NNodes*c.NProcPerNode),
		"LOCAL_RANK="+strconv.Itoa(lr),
		"LOCAL_WORLD_SIZE="+strconv.Itoa(c.NProcPerNode),
		"NODE_RANK="+strconv.Itoa(c.NodeRank),
		"GROUP_RANK="+strconv.Itoa(c.NodeRank),
		"MASTER_ADDR="+c.MasterAddr,
		"MASTER_PORT="+strconv.Itoa(c.MasterPort),
		tcp.EnvToken+"="+c.Token,
		EnvLauncher+"=trellis launch",
	)
}

// Run starts the workers and waits for them; see Start and Wait.
func Run(ctx context.Context, cfg Config) error {
	j, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	return j.Wait()
}

// WorkerError reports the first worker that failed.
type WorkerError struct {
	Rank       int
	Status     string   // e.g. "exit status 1" or "signal: killed"
	Code       int      // its exit code; -1 when a signal ended it
	Tail       []string // its last lines of output
	Stopped    []int    // ranks the launcher then had to stop
	AlsoFailed []string // other ranks that failed on their own, with their status
	// Blames is the rank the failed worker's last lines name as the peer
	// that failed (a *comm.PeerError), -1 if none: on a job of several
	// nodes, a worker that died on another node, which this node's
	// launcher only learns of this way. PerNode is the workers per node.
	Blames, PerNode int
}

// BlameNote says which peer the failed worker named, and on which node,
// when that is another rank ("" otherwise).
func (e *WorkerError) BlameNote() string {
	if e.Blames < 0 || e.Blames == e.Rank {
		return ""
	}
	s := fmt.Sprintf("it named rank %d as the peer that failed", e.Blames)
	if e.PerNode > 0 {
		s = fmt.Sprintf("it named rank %d (node %d) as the peer that failed", e.Blames, e.Blames/e.PerNode)
	}
	return s
}

func (e *WorkerError) Error() string {
	s := fmt.Sprintf("launch: rank %d failed (%s)", e.Rank, e.Status)
	if n := e.BlameNote(); n != "" {
		s += ": " + n
	}
	if len(e.AlsoFailed) > 0 {
		s += "; then " + strings.Join(e.AlsoFailed, ", ")
	}
	if len(e.Stopped) > 0 {
		s += fmt.Sprintf("; stopped ranks %v", e.Stopped)
	}
	if len(e.Tail) == 0 {
		return s + "; it wrote nothing"
	}
	s += "; its last lines:"
	for _, l := range e.Tail {
		s += "\n    " + l
	}
	return s
}

// ErrInterrupted is matched by Wait's error when the context was cancelled.
var ErrInterrupted = errors.New("launch: interrupted")
