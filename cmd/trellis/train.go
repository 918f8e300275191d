package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newTrainCmd is a placeholder until its issue lands.
func newTrainCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "train",
		Short: "Train a model",
		RunE:  func(*cobra.Command, []string) error { return errors.New("train: not implemented yet") },
	}
}
