package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newPlanCmd is a placeholder until its issue lands.
func newPlanCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "plan",
		Short: "Search parallel plans for a model on a cluster",
		RunE:  func(*cobra.Command, []string) error { return errors.New("plan: not implemented yet") },
	}
}
