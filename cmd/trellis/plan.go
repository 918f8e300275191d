package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"trellis/internal/bounded"
	"trellis/plan"
)

type planFlags struct {
	model, cluster string
	devices        int
	seq, batch     int
	fix, explain   string
	top            int
	json           bool
	emit, from     string
	imbalance      float64
}

// newPlanCmd is `trellis plan`: search parallel plans for a model on a
// cluster with the planner's cost model (package plan holds the logic).
func newPlanCmd() *cobra.Command {
	var f planFlags
	c := &cobra.Command{
		Use:   "plan --model M --cluster C --devices N --seq S --global-batch B",
		Short: "Search parallel plans for a model on a cluster",
		Long: `Search every parallel plan (dp, tp, pp, cp, vpp, ZeRO stage, sequence parallelism,
micro-batch size, pipeline schedule, recomputation, precision, flash attention, rank
order) for a model on a cluster, drop those that do not fit in device memory, and rank
the rest by predicted step time. docs/PLANNER.md derives the cost model.

--model is a preset (` + strings.Join(plan.ModelPresetNames(), ", ") + `)
or a Hugging Face config.json (model_type ` + strings.Join(plan.HFModelTypes(), ", ") + `).
--cluster is a preset (` + strings.Join(plan.ClusterPresetNames(), ", ") + `) or a TOML/JSON
cluster file (see docs/PLANNER.md).`,
		Example: `  trellis plan --model llama3-70b --cluster dgx-h100 --devices 64 --seq 8192 --global-batch 512
  trellis plan --model gpt3-175b --cluster dgx-a100 --devices 1024 --seq 2048 --global-batch 1536 --fix tp=8,pp=8 --top 3
  trellis plan --model llama3-8b --cluster dgx-h100 --devices 8 --seq 8192 --global-batch 64 --explain dp=8,zero=1 --json
  trellis plan --model llama3-70b --cluster dgx-h100 --devices 64 --seq 8192 --global-batch 128 --emit megatron
  trellis plan --model llama3-70b --cluster dgx-h100 --devices 64 --from megatron -- --tensor-model-parallel-size 8 ...
  trellis plan --model llama3-8b --cluster dgx-h100 --devices 8 --from torchtitan llama3_8b.toml
  trellis plan --model llama3-8b --cluster dgx-h100 --devices 8 --seq 8192 --from deepspeed ds_config.json --fix tp=1,pp=1
  trellis plan --model deepseek-v3 --cluster dgx-h100 --devices 1024 --seq 4096 --global-batch 8192 --explain dp=32,tp=2,pp=8,cp=2,zero=1,sp=on,precision=fp8,ep=16
  trellis plan --model qwen3-30b-a3b --cluster dgx-h100 --devices 16 --seq 4096 --global-batch 1024 --imbalance 1.5`,
		Args: func(_ *cobra.Command, args []string) error {
			switch {
			case f.from == "" && len(args) > 0:
				return fmt.Errorf("plan: unexpected argument %q (only --from takes one: the configuration)", args[0])
			case f.from == "megatron" && len(args) == 0:
				return fmt.Errorf("plan: --from megatron needs the arguments after --, or a file holding them")
			case f.from != "" && f.from != "megatron" && len(args) != 1:
				return fmt.Errorf("plan: --from %s needs one argument: the configuration file", f.from)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.from != "" {
				return runFrom(cmd.OutOrStdout(), f, args)
			}
			return runPlan(cmd.OutOrStdout(), cmd.ErrOrStderr(), f)
		},
	}
	fl := c.Flags()
	fl.StringVar(&f.model, "model", "", "model preset or Hugging Face config.json path (required, except with --from megatron arguments that give --num-layers, --hidden-size, --num-attention-heads and --vocab-size)")
	fl.StringVar(&f.cluster, "cluster", "", "cluster preset or TOML/JSON cluster file (required)")
	fl.IntVar(&f.devices, "devices", 0, "number of devices (default: one node of the cluster)")
	fl.IntVar(&f.seq, "seq", 0, "sequence length in tokens (required)")
	fl.IntVar(&f.batch, "global-batch", 0, "global batch in sequences per step (required)")
	fl.StringVar(&f.fix, "fix", "", "pin plan keys, e.g. tp=8,pp=4,zero=1 (all keys pinned: evaluate one plan)")
	fl.IntVar(&f.top, "top", 5, "how many plans to show")
	fl.StringVar(&f.explain, "explain", "", "explain one plan (missing keys take their defaults): why it is rejected or slower")
	fl.BoolVar(&f.json, "json", false, "print JSON")
	fl.StringVar(&f.emit, "emit", "", "print the chosen plan (or --explain's) as a framework runs it: megatron, torchtitan or deepspeed")
	fl.Float64Var(&f.imbalance, "imbalance", 1, "models with experts: the busiest expert-parallel rank's routed tokens over its balanced share (1: balanced)")
	fl.StringVar(&f.from, "from", "", "read a framework configuration and explain it: --from megatron -- ARGS... (or a file of them), --from torchtitan job.toml, --from deepspeed ds_config.json (with --fix for the keys DeepSpeed's JSON lacks)")
	addServeFlag(c, &f) // plan_serve.go
	return c
}

func runPlan(w, info io.Writer, f planFlags) error {
	job, err := planJob(f)
	if err != nil {
		return err
	}
	fix, err := plan.ParseFix(f.fix)
	if err != nil {
		return fmt.Errorf("--fix: %w", err)
	}
	opts := plan.Options{Fix: fix, Top: f.top}
	res, err := job.Search(opts)
	if err != nil {
		return err
	}
	if f.emit != "" && f.explain != "" {
		p, err := plan.Parse(f.explain)
		if err != nil {
			return fmt.Errorf("--explain: %w", err)
		}
		return emitPlan(w, info, job, p, f.emit, f.json)
	}
	if f.explain != "" {
		return explainPlan(w, job, res, f)
	}
	advice := job.Advice(res, opts)
	if f.emit != "" && len(advice) == 0 {
		return emitPlan(w, info, job, res.Plans[0].Plan, f.emit, f.json)
	}
	if f.json {
		r := job.Report(res)
		r.Advice = advice
		err = writeJSON(w, r)
	} else {
		text := job.Table(res)
		if len(advice) > 0 {
			text += "\nwhy, and what would make a plan fit:\n  " + strings.Join(advice, "\n  ") + "\n"
		}
		_, err = io.WriteString(w, text)
	}
	if err == nil && len(advice) > 0 {
		err = fmt.Errorf("plan: no plan fits: %s", advice[0])
	}
	return err
}

func planJob(f planFlags) (plan.Job, error) { return planJobModel(f, nil) }

// planJobModel is planJob with the model given (m, for --from megatron
// arguments that state it) instead of --model when m is not nil.
func planJobModel(f planFlags, given *plan.Model) (plan.Job, error) {
	switch {
	case f.model == "" && given == nil:
		return plan.Job{}, errors.New("plan: --model is required")
	case f.cluster == "":
		return plan.Job{}, errors.New("plan: --cluster is required")
	case f.seq == 0:
		return plan.Job{}, errors.New("plan: --seq is required (tokens per sequence)")
	case f.seq < 0:
		return plan.Job{}, fmt.Errorf("plan: --seq=%d: must be a positive number of tokens", f.seq)
	case f.batch == 0:
		return plan.Job{}, errors.New("plan: --global-batch is required (sequences per step)")
	case f.batch < 0:
		return plan.Job{}, fmt.Errorf("plan: --global-batch=%d: must be a positive number of sequences", f.batch)
	case f.devices < 0:
		return plan.Job{}, fmt.Errorf("plan: --devices=%d: must be positive (0 or absent: one node of the cluster)", f.devices)
	case f.top < 1:
		return plan.Job{}, fmt.Errorf("plan: --top=%d: must be at least 1", f.top)
	}
	var m plan.Model
	var err error
	if given != nil {
		m = *given
	} else if m, err = loadModel(f.model); err != nil {
		return plan.Job{}, err
	}
	c, err := loadCluster(f.cluster)
	if err != nil {
		return plan.Job{}, err
	}
	n := f.devices
	if n == 0 {
		n = c.DevicesPerNode
	}
	j := plan.Job{Model: m, Cluster: c, Devices: n, Seq: f.seq, GlobalBatch: f.batch}
	if f.imbalance != 1 {
		j.Imbalance = f.imbalance
	}
	return j, j.Validate()
}

// loadModel takes a preset name, or reads a config.json when the argument
// names a file.
func loadModel(s string) (plan.Model, error) {
	if m, err := plan.ModelPreset(s); err == nil {
		return m, nil
	} else if _, statErr := os.Stat(s); statErr != nil {
		return plan.Model{}, err
	}
	data, err := bounded.ReadFile(s, bounded.Config, "model file (config.json)")
	if err != nil {
		return plan.Model{}, fmt.Errorf("--model: %w", err)
	}
	m, err := plan.ParseHFConfig(data, s)
	if err != nil {
		return plan.Model{}, fmt.Errorf("%s: %w", s, err)
	}
	return m, nil
}

func loadCluster(s string) (plan.Cluster, error) {
	if c, err := plan.ClusterPreset(s); err == nil {
		return c, nil
	} else if _, statErr := os.Stat(s); statErr != nil {
		return plan.Cluster{}, err
	}
	data, err := bounded.ReadFile(s, bounded.Config, "cluster file")
	if err != nil {
		return plan.Cluster{}, fmt.Errorf("--cluster: %w", err)
	}
	c, err := plan.ParseClusterFile(data)
	if err != nil {
		return plan.Cluster{}, fmt.Errorf("%s: %w", s, err)
	}
	return c, nil
}

func explainPlan(w io.Writer, job plan.Job, res plan.Result, f planFlags) error {
	p, err := plan.Parse(f.explain)
	if err != nil {
		return fmt.Errorf("--explain: %w", err)
	}
	var best *plan.Estimate
	if len(res.Plans) > 0 {
		best = &res.Plans[0]
	}
	if !f.json {
		text := job.Explain(p, best)
		if job.Check(p) == nil { // the schedule of a plan that is one: sized by its pp, vpp and micro-batches
			text += scheduleText(p, job.MicroBatches(p))
		}
		_, err = io.WriteString(w, text)
		return err
	}
	out := struct {
		Plan       plan.PlanJSON      `json:"plan"`
		PlanString string             `json:"plan_string"`
		Valid      bool               `json:"valid"`
		Fits       bool               `json:"fits"`
		Reason     string             `json:"reason,omitempty"`
		Est        *plan.EstimateJSON `json:"estimate,omitempty"`
		Best       *plan.EstimateJSON `json:"best,omitempty"`
		Text       string             `json:"text"`
	}{Plan: p.JSON(), PlanString: p.String(), Text: job.Explain(p, best)}
	if e, err := job.Evaluate(p); err != nil {
		out.Reason = err.Error()
	} else {
		ej := e.JSON()
		out.Valid, out.Fits, out.Est, out.Reason = true, e.Fits(), &ej, e.Why()
	}
	if best != nil {
		bj := best.JSON()
		out.Best = &bj
	}
	return writeJSON(w, out)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
