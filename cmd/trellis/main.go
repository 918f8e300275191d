// Command trellis trains GPT-style models across ranks and plans how to split
// them over a cluster. See README.md.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	root := &cobra.Command{
		Use:           "trellis",
		Short:         "Train models that do not fit on one device, and plan how to split them",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newTrainCmd(), newSampleCmd(), newPlanCmd(), newLaunchCmd(), newBenchCmd(), newTraceCmd(), newExportCmd(), newProfileCmd(), newReportCmd())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "trellis:", err)
		os.Exit(1)
	}
}

func newBenchCmd() *cobra.Command {
	c := &cobra.Command{Use: "bench", Short: "Measure kernels and collectives on this machine"}
	c.AddCommand(newBenchMatmulCmd(), newBenchCommCmd())
	return c
}
