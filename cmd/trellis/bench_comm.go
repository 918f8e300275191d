package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"trellis/comm/commbench"
	"trellis/comm/world"
	"trellis/device"
	"trellis/internal/checked"
	"trellis/internal/sysmem"
)

// maxBenchRanks bounds --ranks: goroutines or processes on this one host.
const maxBenchRanks = 1024

// maxBenchIters bounds --iters and --warmup.
const maxBenchIters = 1_000_000

// checkBenchComm validates the numeric flags of bench comm, naming the
// flag and the rule: every rank holds a send and a receive buffer of the
// largest size, all on this host, so ranks × 2 × size must fit this
// machine's memory.
func checkBenchComm(ranks, iters, warmup int, sizes []int64) error {
	switch {
	case ranks < 1 || ranks > maxBenchRanks:
		return fmt.Errorf("bench comm: --ranks=%d must be in [1, %d]", ranks, maxBenchRanks)
	case iters < 0 || iters > maxBenchIters:
		return fmt.Errorf("bench comm: --iters=%d must be in [0, %d] (0: automatic)", iters, maxBenchIters)
	case warmup > maxBenchIters:
		return fmt.Errorf("bench comm: --warmup=%d must be at most %d", warmup, maxBenchIters)
	case len(sizes) == 0:
		return fmt.Errorf("bench comm: --sizes is empty")
	}
	big := slices.Max(sizes)
	need, ok := checked.Product(int64(ranks), 2, big)
	if !ok {
		return fmt.Errorf("bench comm: --sizes up to %s on --ranks=%d: ranks × 2 × size %v", device.FormatBytes(big), ranks, checked.ErrOverflow)
	}
	if phys, known := sysmem.Physical(); known && need > phys {
		return fmt.Errorf("bench comm: --sizes up to %s on --ranks=%d needs at least %s (a send and a receive buffer per rank), more than this machine's memory, %s",
			device.FormatBytes(big), ranks, device.FormatBytes(need), device.FormatBytes(phys))
	}
	return nil
}

// newBenchCommCmd: trellis bench comm --backend local|tcp|shm|auto|mpi
// --ranks N [--ops allreduce,...] [--sizes 1KiB:256MiB] [--json]. The logic
// lives in comm/commbench; for the process backends this binary
// re-executes itself as the workers (the hidden --worker flag).
func newBenchCommCmd() *cobra.Command {
	var (
		backend, ops, sizes  string
		ranks, iters, warmup int
		asJSON, worker       bool
	)
	c := &cobra.Command{
		Use:   "comm",
		Short: "Measure collective bandwidth (nccl-tests style) against loopback TCP and memcpy",
		Example: "  trellis bench comm --backend tcp --ranks 2 --ops allreduce --sizes 64MiB\n" +
			"  trellis bench comm --backend shm --ranks 4 --ops allreduce,alltoall --sizes 64MiB\n" +
			"  trellis bench comm --backend local --ranks 4 --sizes 1KiB:256MiB --json",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sz, err := commbench.ParseSizes(sizes)
			if err != nil {
				return fmt.Errorf("bench comm: --sizes: %w", err)
			}
			if err := checkBenchComm(ranks, iters, warmup, sz); err != nil {
				return err
			}
			cfg := commbench.Config{Backend: backend, Ranks: ranks, Ops: strings.Split(ops, ","), Sizes: sz,
				Iters: iters, Warmup: warmup}
			if worker {
				return commbench.RunWorker(cfg)
			}
			if backend == "mpi" {
				return benchMPI(cmd.OutOrStdout(), cfg, asJSON)
			}
			if backend != "local" {
				if cfg.Program, err = os.Executable(); err != nil {
					return err
				}
				cfg.Args = []string{"bench", "comm", "--worker", "--backend", backend, "--ranks", strconv.Itoa(ranks),
					"--ops", ops, "--sizes", sizes, "--iters", strconv.Itoa(iters), "--warmup", strconv.Itoa(warmup)}
			}
			rep, err := commbench.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if asJSON {
				return rep.WriteJSON(cmd.OutOrStdout())
			}
			rep.WriteTable(cmd.OutOrStdout())
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&backend, "backend", "local", "local (goroutine ranks), tcp (one process per rank on loopback), shm (one process per rank, shared memory), auto (what trellis train picks under a launcher: shm on one host) or mpi (run under mpirun -np N; a binary built with -tags mpi)")
	f.IntVar(&ranks, "ranks", 2, "world size")
	f.StringVar(&ops, "ops", strings.Join(commbench.Ops(), ","), "comma-separated operations")
	f.StringVar(&sizes, "sizes", "1KiB:256MiB", "LO:HI (powers of two) or a comma-separated list of sizes in bytes")
	f.IntVar(&iters, "iters", 0, "timed repetitions per size (0: enough to move about 256 MiB, 5 to 200)")
	f.IntVar(&warmup, "warmup", 0, "untimed repetitions per size (0: 2, negative: none)")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	f.BoolVar(&worker, "worker", false, "run as a worker process (used by the benchmark itself)")
	f.MarkHidden("worker")
	return c
}

// benchMPI is trellis bench comm --backend mpi: every process of an mpirun
// (or srun) job measures on the MPI world and rank 0 prints the report,
// with the memcpy reference (--ranks is the job's size, not a flag's).
func benchMPI(out io.Writer, cfg commbench.Config, asJSON bool) error {
	w, err := world.Open("mpi", world.Config{})
	if err != nil {
		return fmt.Errorf("bench comm: --backend mpi: %w", err)
	}
	defer w.Close()
	cfg.Backend, cfg.Ranks = "mpi", w.Group.Size()
	rows, err := commbench.Measure(w.Group, cfg)
	if err != nil || w.Group.Rank() != 0 {
		return err
	}
	rep := commbench.Report{Rows: rows}
	rep.Reference.MemcpyGBps = commbench.MemcpyGBps(5)
	if asJSON {
		return rep.WriteJSON(out)
	}
	rep.WriteTable(out)
	return nil
}
