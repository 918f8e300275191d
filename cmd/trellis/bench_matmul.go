package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newBenchMatmulCmd is a placeholder until its issue lands.
func newBenchMatmulCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "matmul",
		Short: "Measure matmul GFLOP/s",
		RunE:  func(*cobra.Command, []string) error { return errors.New("matmul: not implemented yet") },
	}
}
