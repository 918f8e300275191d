package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newSampleCmd is a placeholder until its issue lands.
func newSampleCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "sample",
		Short: "Generate text from a checkpoint",
		RunE:  func(*cobra.Command, []string) error { return errors.New("sample: not implemented yet") },
	}
}
