package main

import (
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"trellis/comm/commbench"
)

// newBenchCommCmd: trellis bench comm --backend local|tcp --ranks N
// [--ops allreduce,...] [--sizes 1KiB:256MiB] [--json]. The logic lives in
// comm/commbench; for tcp this binary re-executes itself as the workers
// (the hidden --worker flag).
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
			"  trellis bench comm --backend local --ranks 4 --sizes 1KiB:256MiB --json",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sz, err := commbench.ParseSizes(sizes)
			if err != nil {
				return err
			}
			cfg := commbench.Config{Backend: backend, Ranks: ranks, Ops: strings.Split(ops, ","), Sizes: sz,
				Iters: iters, Warmup: warmup}
			if worker {
				return commbench.RunWorker(cfg)
			}
			if backend == "tcp" {
				if cfg.Program, err = os.Executable(); err != nil {
					return err
				}
				cfg.Args = []string{"bench", "comm", "--worker", "--backend", "tcp", "--ranks", strconv.Itoa(ranks),
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
	f.StringVar(&backend, "backend", "local", "local (goroutine ranks) or tcp (one process per rank on loopback)")
	f.IntVar(&ranks, "ranks", 2, "world size")
	f.StringVar(&ops, "ops", strings.Join(commbench.Ops(), ","), "comma-separated operations")
	f.StringVar(&sizes, "sizes", "1KiB:256MiB", "LO:HI (powers of two) or a comma-separated list of sizes in bytes")
	f.IntVar(&iters, "iters", 0, "timed repetitions per size (0: enough to move about 256 MiB, 5 to 200)")
	f.IntVar(&warmup, "warmup", 0, "untimed repetitions per size (0: 2, negative: none)")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	f.BoolVar(&worker, "worker", false, "run as a tcp worker (used by the benchmark itself)")
	f.MarkHidden("worker")
	return c
}
