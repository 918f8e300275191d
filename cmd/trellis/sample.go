package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"trellis/train"
)

func newSampleCmd() *cobra.Command {
	var o train.SampleOptions
	c := &cobra.Command{
		Use:   "sample",
		Short: "Generate text from a checkpoint",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Checkpoint == "" {
				return fmt.Errorf("--checkpoint is required")
			}
			txt, err := train.SampleCheckpoint(o)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s%s\n", o.Prompt, txt)
			return nil
		},
	}
	fl := c.Flags()
	fl.StringVar(&o.Checkpoint, "checkpoint", "", "checkpoint directory (a step directory or a checkpoint root)")
	fl.StringVar(&o.Prompt, "prompt", "", "text to continue")
	fl.IntVar(&o.Tokens, "tokens", 200, "tokens to generate")
	fl.Float64Var(&o.Temperature, "temperature", 0.8, "sampling temperature (0: greedy)")
	fl.IntVar(&o.TopK, "top-k", 40, "sample among the k most likely tokens (0: all)")
	fl.Uint64Var(&o.Seed, "seed", 1, "sampling seed")
	fl.IntVar(&o.Threads, "threads", 0, "kernel threads (0: all CPUs)")
	return c
}
