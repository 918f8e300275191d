package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"trellis/trace"
)

func newTraceCmd() *cobra.Command {
	c := &cobra.Command{Use: "trace", Short: "Work with the timelines trellis train --trace writes"}
	c.AddCommand(&cobra.Command{
		Use:   "merge DIR",
		Short: "Join the per-process trace files of a launched run into DIR/trace.json",
		Long: `Under trellis launch each process of trellis train --trace DIR writes its own
DIR/trace.rank<N>.json; merge joins them into DIR/trace.json (open it in
https://ui.perfetto.dev or chrome://tracing) and prints each rank's idle
fraction of its last step: the time outside forward and backward passes,
which for a pipeline with equal-cost stages is the bubble.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, n, err := trace.Merge(args[0])
			if err != nil {
				return err
			}
			evs, err := trace.Read(path)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "wrote %s (%d rank files)\n", path, n)
			printIdle(w, evs)
			return nil
		},
	})
	return c
}

// printIdle prints each rank's idle fraction of its last step and, for a
// pipeline, of the schedule alone (its bubble).
func printIdle(w io.Writer, evs []trace.Event) {
	for _, ri := range append(trace.Idle(evs, "step"), trace.Idle(evs, "pipeline")...) {
		fmt.Fprintf(w, "rank %d  %s  %.1f ms, compute %.1f ms, idle %.1f%%\n",
			ri.Rank, ri.Step, float64(ri.Span)/1e3, float64(ri.Busy)/1e3, 100*ri.Idle)
	}
}
