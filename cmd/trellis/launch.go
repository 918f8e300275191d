package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newLaunchCmd is a placeholder until its issue lands.
func newLaunchCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "launch",
		Short: "Start one worker process per rank (torchrun-style)",
		RunE:  func(*cobra.Command, []string) error { return errors.New("launch: not implemented yet") },
	}
}
