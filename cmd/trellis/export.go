package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"trellis/hf"
	"trellis/internal/bounded"
	"trellis/internal/outfile"
	"trellis/safetensors"
	"trellis/train"
)

func newExportCmd() *cobra.Command {
	var ckpt, out, dtype string
	var force, dropless bool
	c := &cobra.Command{
		Use:   "export",
		Short: "Write a checkpoint's weights as a Hugging Face model (model.safetensors + config.json): GPT-2, Llama or MoE Llama",
		Long: `Export reads the weights of a checkpoint written under any plan and writes
a directory that transformers loads: for a GPT-2, GPT2LMHeadModel's
(model.safetensors in Hugging Face GPT-2 naming, Conv1D weights stored
(in, out), the LM head tied to wte); for a Llama, LlamaForCausalLM's
(Hugging Face's names under "model.", q_proj and k_proj rows in its
rotate_half RoPE order, lm_head unless tied); for a Llama with experts,
Qwen2MoeForCausalLM's (the router as mlp.gate, each expert's gate_proj,
up_proj and down_proj, norm_topk_prob false, the dense layers as
mlp_only_layers/decoder_sparse_step, zero q/k/v biases and an empty
shared expert); and config.json. An MoE model with shared experts or a
sigmoid router has no exact Hugging Face form and is refused; one with a
capacity factor is refused unless --dropless writes it as the dropless
model (Qwen2-MoE drops no tokens).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ckpt == "" || out == "" {
				return fmt.Errorf("--checkpoint and --out are required")
			}
			dt := safetensors.DType(strings.ToUpper(dtype))
			if dt != safetensors.F32 && dt != safetensors.BF16 && dt != safetensors.F16 {
				return fmt.Errorf("--dtype=%q: want f32, bf16 or f16", dtype)
			}
			if err := checkExportDir(out, ckpt, force); err != nil {
				return err
			}
			ws, err := train.LoadWeights(ckpt, nil)
			if err != nil {
				return err
			}
			if dropless {
				if ws.Model.Experts == 0 {
					return fmt.Errorf("--dropless: %s is a dense model (model.experts=0): it has no capacity factor", ws.Source)
				}
				ws.Model.CapacityFactor = 0
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
	fl.BoolVar(&force, "force", false, "replace a model already in --out")
	fl.BoolVar(&dropless, "dropless", false, "write an MoE model trained with a capacity factor as the dropless model (capacity_factor=0), the one Qwen2MoeForCausalLM computes")
	return c
}

// checkExportDir refuses an --out that is not a directory, that is the
// checkpoint being read, or that already holds a model (unless force): an
// export does not silently replace another model.
func checkExportDir(out, ckpt string, force bool) error {
	st, err := os.Stat(out)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("--out %s: %w", out, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("--out %s is %s: it names the directory to write %s and %s into", out, bounded.Kind(st.Mode()), hf.WeightsFile, hf.ConfigFile)
	}
	if cs, err := os.Stat(ckpt); err == nil && os.SameFile(st, cs) {
		return fmt.Errorf("--out %s is the --checkpoint directory: export into a directory of its own", out)
	}
	for _, name := range []string{hf.WeightsFile, hf.ConfigFile} {
		p := filepath.Join(out, name)
		if _, err := os.Lstat(p); err == nil && !force {
			return fmt.Errorf("--out %s already holds a model (%s): choose another directory, or pass --force to replace it", out, p)
		}
		if err := outfile.Check("--out", p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}
