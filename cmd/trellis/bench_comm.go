package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newBenchCommCmd is a placeholder until its issue lands.
func newBenchCommCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "comm",
		Short: "Measure collective bandwidth",
		RunE:  func(*cobra.Command, []string) error { return errors.New("comm: not implemented yet") },
	}
}
