// Package commbench measures collective bandwidth the way nccl-tests does:
// for each operation and size, the mean time per operation (the slowest
// rank's), the algorithm bandwidth algbw = bytes / time and the bus
// bandwidth busbw = algbw × the operation's factor (see busFactor), which is
// comparable across world sizes and with a link's raw bandwidth. The same
// run measures two references for it: a single loopback TCP stream and a
// memcpy. GB/s means 1e9 bytes per second.
//
// The local backend runs its ranks as goroutines of this process; the
// process backends (tcp, shm, auto: see comm/world) start one worker
// process per rank on this host through package launch (the program
// re-executes itself; see Config.Program).
package commbench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"

	"trellis/comm/local"
	"trellis/comm/world"
	"trellis/launch"
)

// Backends are the backends Run measures: local in this process, the
// others as launched processes on this host.
func Backends() []string { return []string{"local", "tcp", "shm", "auto"} }

// Config selects what to measure.
type Config struct {
	Backend string   // one of Backends()
	Ranks   int      // world size
	Ops     []string // from Ops()
	Sizes   []int64  // bytes
	Iters   int      // timed repetitions per size; 0 chooses (see iterations)
	Warmup  int      // untimed repetitions first; 0 means 2, negative none

	// For a process backend: the worker program and its arguments, which
	// must lead to RunWorker with the same Config (the CLI re-executes
	// itself), and where the workers' output goes (default os.Stderr).
	Program string
	Args    []string
	Stderr  io.Writer
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case !slices.Contains(Backends(), c.Backend):
		return fmt.Errorf("commbench: Backend=%q: want one of %v", c.Backend, Backends())
	case c.Ranks < 1:
		return fmt.Errorf("commbench: --ranks=%d: must be at least 1", c.Ranks)
	case len(c.Ops) == 0 || len(c.Sizes) == 0:
		return fmt.Errorf("commbench: --ops=%v, --sizes=%v: need at least one of each", c.Ops, c.Sizes)
	case c.Iters < 0:
		return fmt.Errorf("commbench: --iters=%d: must not be negative", c.Iters)
	}
	for _, op := range c.Ops {
		if !slices.Contains(Ops(), op) {
			return fmt.Errorf("commbench: --ops: unknown op %q (want some of %v)", op, Ops())
		}
	}
	for _, s := range c.Sizes {
		if s < 4 || s > 1<<33 {
			return fmt.Errorf("commbench: --sizes: %d bytes is outside [4 B, 8 GiB]", s)
		}
	}
	return c.checkParts()
}

// checkParts refuses a size that leaves each rank of a reduce-scatter or
// all-gather no fp32 element (it would time nothing and report a
// bandwidth).
func (c Config) checkParts() error {
	least := slices.Min(c.Sizes)
	for _, op := range c.Ops {
		if (op == "reducescatter" || op == "allgather") && least < 4*int64(c.Ranks) {
			return fmt.Errorf("commbench: --sizes %d with --ops %s on --ranks=%d: each rank's part would hold %d fp32 elements; %s needs at least 4 × ranks = %d bytes",
				least, op, c.Ranks, least/4/int64(c.Ranks), op, 4*int64(c.Ranks))
		}
	}
	return nil
}

func (c Config) warmup() int {
	switch {
	case c.Warmup == 0:
		return 2
	case c.Warmup < 0:
		return 0
	}
	return c.Warmup
}

// Row is one line of the table.
type Row struct {
	Backend   string  `json:"backend"`
	Op        string  `json:"op"`
	Ranks     int     `json:"ranks"`
	Bytes     int64   `json:"bytes"`
	TimeS     float64 `json:"time_s"`
	AlgBWGBps float64 `json:"algbw_gbps"`
	BusBWGBps float64 `json:"busbw_gbps"`
}

// Reference holds the bandwidths the targets compare against.
type Reference struct {
	TCPStreamGBps float64 `json:"tcp_stream_gbps"`
	MemcpyGBps    float64 `json:"memcpy_gbps"`
}

// Report is a whole run.
type Report struct {
	Rows      []Row     `json:"rows"`
	Reference Reference `json:"reference"`
}

// Run measures the references, then the collectives.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var rep Report
	var err error
	rep.Reference.MemcpyGBps = MemcpyGBps(5)
	if rep.Reference.TCPStreamGBps, err = TCPStreamGBps(5); err != nil {
		return nil, err
	}
	if cfg.Backend == "local" {
		rep.Rows, err = runLocal(cfg)
	} else {
		rep.Rows, err = runProcs(ctx, cfg)
	}
	if err != nil {
		return nil, err
	}
	return &rep, nil
}

func runLocal(cfg Config) ([]Row, error) {
	groups, err := local.New(local.Config{Size: cfg.Ranks, Poll: local.PollFor(cfg.Ranks, runtime.GOMAXPROCS(0))})
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, g := range groups {
			g.Close()
		}
	}()
	rows := make([][]Row, len(groups))
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for r, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rows[r], errs[r] = Measure(g, cfg)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return rows[0], nil
}

// EnvOut names the file rank 0 of a process backend writes its rows to;
// EnvBackend the backend, for a worker whose Config names none.
const (
	EnvOut     = "TRELLIS_BENCH_OUT"
	EnvBackend = "TRELLIS_BENCH_BACKEND"
)

func runProcs(ctx context.Context, cfg Config) ([]Row, error) {
	if cfg.Program == "" {
		return nil, fmt.Errorf("commbench: Program is empty: the %s backend needs a worker program", cfg.Backend)
	}
	dir, err := os.MkdirTemp("", "trellis-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "rows.json")
	stderr := cfg.Stderr
	if stderr == nil {
		stderr = os.Stderr
	}
	err = launch.Run(ctx, launch.Config{NProcPerNode: cfg.Ranks, Program: cfg.Program, Args: cfg.Args,
		Env: []string{EnvOut + "=" + out, EnvBackend + "=" + cfg.Backend}, Stdout: stderr, Stderr: stderr})
	if err != nil {
		return nil, fmt.Errorf("commbench: %s workers: %w", cfg.Backend, err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return nil, fmt.Errorf("commbench: %s workers wrote no results: %w", cfg.Backend, err)
	}
	var rows []Row
	if err := json.Unmarshal(b, &rows); err != nil {
		return nil, fmt.Errorf("commbench: %s results: %w", cfg.Backend, err)
	}
	return rows, nil
}

// RunWorker is the body of a worker process: it joins the world of
// cfg.Backend that its launcher describes (comm/world), measures, and rank
// 0 writes the rows to $EnvOut. A row's backend is what was opened (auto:
// shm on one host, tcp where shared memory is unusable).
func RunWorker(cfg Config) error {
	env, err := launch.WorkerEnv()
	if err != nil {
		return err
	}
	if cfg.Backend == "" {
		cfg.Backend = os.Getenv(EnvBackend)
	}
	w, err := world.Open(cfg.Backend, world.Config{Placement: Placement(env)})
	if err != nil {
		return err
	}
	defer w.Close()
	g := w.Group
	if cfg.Backend == "auto" {
		cfg.Backend = w.Backend
	}
	rows, err := Measure(g, cfg)
	if err != nil || g.Rank() != 0 {
		return err
	}
	b, err := json.Marshal(rows)
	if err != nil {
		return err
	}
	return os.WriteFile(os.Getenv(EnvOut), b, 0o644)
}

// WriteJSON writes the report as one JSON object.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes an nccl-tests-style table and the references.
func (r *Report) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "%-8s %-14s %5s %12s %12s %12s %12s\n", "backend", "op", "ranks", "bytes", "time(us)", "algbw(GB/s)", "busbw(GB/s)")
	for _, row := range r.Rows {
		fmt.Fprintf(w, "%-8s %-14s %5d %12s %12.1f %12.3f %12.3f\n", row.Backend, row.Op, row.Ranks,
			FormatBytes(row.Bytes), row.TimeS*1e6, row.AlgBWGBps, row.BusBWGBps)
	}
	fmt.Fprintf(w, "reference: single-stream loopback TCP %.3f GB/s, memcpy %.3f GB/s\n",
		r.Reference.TCPStreamGBps, r.Reference.MemcpyGBps)
}

// Placement is a worker's place in its job (launch's reading of its
// environment) in comm/world's terms.
func Placement(e launch.Env) *world.Placement {
	return &world.Placement{Rank: e.Rank, Size: e.WorldSize, LocalRank: e.LocalRank, LocalSize: e.LocalWorldSize,
		NodeRank: e.NodeRank, MasterAddr: e.MasterAddr, MasterPort: e.MasterPort, Source: e.Source}
}
