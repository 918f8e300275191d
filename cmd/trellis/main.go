// Command trellis trains GPT-style models across ranks and plans how to split
// them over a cluster. See README.md.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"trellis/launch"
)

func main() {
	root := &cobra.Command{
		Use:           "trellis",
		Short:         "Train models that do not fit on one device, and plan how to split them",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newTrainCmd(), newSampleCmd(), newPlanCmd(), newLaunchCmd(), newBenchCmd(), newTraceCmd(), newExportCmd(), newProfileCmd(), newReportCmd())
	root.SetArgs(quotedArgs(os.Args[1:]))
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "trellis:", err)
		if errors.As(err, new(configError)) {
			os.Exit(launch.ExitConfig)
		}
		os.Exit(1)
	}
}

// configError is a job that cannot run as configured (checked before any
// training): the process exits with launch.ExitConfig, so a restarting
// launcher does not start it again to fail the same way.
type configError struct{ error }

func (e configError) Unwrap() error { return e.error }

func newBenchCmd() *cobra.Command {
	c := &cobra.Command{Use: "bench", Short: "Measure kernels and collectives on this machine"}
	c.AddCommand(newBenchMatmulCmd(), newBenchCommCmd())
	return c
}
