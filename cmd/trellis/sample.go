package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"trellis/train"
)

func newSampleCmd() *cobra.Command {
	var o train.SampleOptions
	c := &cobra.Command{
		Use:   "sample",
		Short: "Generate text from a checkpoint",
		Long: `Generate text from a checkpoint. Tokens are printed as they are drawn,
so a long --tokens shows output at once and Ctrl-C stops it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Checkpoint == "" {
				return fmt.Errorf("--checkpoint is required")
			}
			if err := o.Validate(); err != nil {
				return err
			}
			out := &promptFirst{w: cmd.OutOrStdout(), prompt: o.Prompt}
			o.Out = out
			if _, err := train.SampleCheckpoint(o); err != nil {
				return err
			}
			_, err := out.Write([]byte("\n"))
			return err
		},
	}
	fl := c.Flags()
	fl.StringVar(&o.Checkpoint, "checkpoint", "", "checkpoint directory (a step directory or a checkpoint root) or a Hugging Face GPT-2 or Llama directory")
	fl.StringVar(&o.Tokenizer, "tokenizer", "", "byte or gpt2 (default: the one the checkpoint records, or its vocabulary implies)")
	fl.StringVar(&o.Prompt, "prompt", "", "text to continue")
	fl.IntVar(&o.Tokens, "tokens", 200, "tokens to generate (printed as they come)")
	fl.Float64Var(&o.Temperature, "temperature", 0.8, "sampling temperature, finite and >= 0 (0: greedy)")
	fl.IntVar(&o.TopK, "top-k", 40, "sample among the k most likely tokens (0: all)")
	fl.Uint64Var(&o.Seed, "seed", 1, "sampling seed")
	fl.IntVar(&o.Threads, "threads", 0, fmt.Sprintf("kernel threads, at most %d (0: all CPUs)", train.MaxThreads))
	return c
}

// promptFirst writes the prompt before the first generated text, so that
// nothing is printed for a checkpoint that fails to load.
type promptFirst struct {
	w      io.Writer
	prompt string
	done   bool
}

func (p *promptFirst) Write(b []byte) (int, error) {
	if !p.done {
		p.done = true
		if _, err := fmt.Fprint(p.w, p.prompt); err != nil {
			return 0, err
		}
	}
	return p.w.Write(b)
}
