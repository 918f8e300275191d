package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"trellis/hf"
	"trellis/safetensors"
	"trellis/train"
)

func newExportCmd() *cobra.Command {
	var ckpt, out, dtype string
	c := &cobra.Command{
		Use:   "export",
		Short: "Write a checkpoint's weights as a Hugging Face model (model.safetensors + config.json): GPT-2 or Llama",
		Long: `Export reads the weights of a checkpoint written under any plan and writes
a directory that transformers loads: for a GPT-2, GPT2LMHeadModel's
(model.safetensors in Hugging Face GPT-2 naming, Conv1D weights stored
(in, out), the LM head tied to wte); for a Llama, LlamaForCausalLM's
(Hugging Face's names under "model.", q_proj and k_proj rows in its
rotate_half RoPE order, lm_head unless tied); and config.json.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ckpt == "" || out == "" {
				return fmt.Errorf("--checkpoint and --out are required")
			}
			dt := safetensors.DType(strings.ToUpper(dtype))
			if dt != safetensors.F32 && dt != safetensors.BF16 && dt != safetensors.F16 {
				return fmt.Errorf("--dtype=%q: want f32, bf16 or f16", dtype)
			}
			ws, err := train.LoadWeights(ckpt, nil)
			if err != nil {
				return err
			}
			m := hf.Model{Config: ws.Model, W: ws.W}
			if ws.Tokenizer != "" {
				m.Meta = map[string]string{hf.MetaTokenizer: ws.Tokenizer}
			}
			if err := hf.Write(out, m, dt); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s/{%s,%s}: %d parameters (%s) from %s\n",
				out, hf.WeightsFile, hf.ConfigFile, len(ws.W), strings.ToLower(dtype), ws.Source)
			return nil
		},
	}
	fl := c.Flags()
	fl.StringVar(&ckpt, "checkpoint", "", "checkpoint directory (a step directory or a checkpoint root)")
	fl.StringVar(&out, "out", "", "output directory")
	fl.StringVar(&dtype, "dtype", "f32", "element type of the weights: f32, bf16 or f16")
	return c
}
