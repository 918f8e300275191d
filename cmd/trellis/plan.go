package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"trellis/plan"
)

type planFlags struct {
	model, cluster string
	devices        int
	seq, batch     int
	fix, explain   string
	top            int
	json           bool
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
or a Hugging Face config.json (model_type gpt2 or llama).
--cluster is a preset (` + strings.Join(plan.ClusterPresetNames(), ", ") + `) or a TOML/JSON
cluster file (see docs/PLANNER.md).`,
		Example: `  trellis plan --model llama3-70b --cluster dgx-h100 --devices 64 --seq 8192 --global-batch 512
  trellis plan --model gpt3-175b --cluster dgx-a100 --devices 1024 --seq 2048 --global-batch 1536 --fix tp=8,pp=8 --top 3
  trellis plan --model llama3-8b --cluster dgx-h100 --devices 8 --seq 8192 --global-batch 64 --explain dp=8,zero=1 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runPlan(cmd.OutOrStdout(), f) },
	}
	fl := c.Flags()
	fl.StringVar(&f.model, "model", "", "model preset or Hugging Face config.json path (required)")
	fl.StringVar(&f.cluster, "cluster", "", "cluster preset or TOML/JSON cluster file (required)")
	fl.IntVar(&f.devices, "devices", 0, "number of devices (default: one node of the cluster)")
	fl.IntVar(&f.seq, "seq", 0, "sequence length in tokens (required)")
	fl.IntVar(&f.batch, "global-batch", 0, "global batch in sequences per step (required)")
	fl.StringVar(&f.fix, "fix", "", "pin plan keys, e.g. tp=8,pp=4,zero=1 (all keys pinned: evaluate one plan)")
	fl.IntVar(&f.top, "top", 5, "how many plans to show")
	fl.StringVar(&f.explain, "explain", "", "explain one plan (missing keys take their defaults): why it is rejected or slower")
	fl.BoolVar(&f.json, "json", false, "print JSON")
	addServeFlag(c, &f) // plan_serve.go
	return c
}

func runPlan(w io.Writer, f planFlags) error {
	job, err := planJob(f)
	if err != nil {
		return err
	}
	fix, err := plan.ParseFix(f.fix)
	if err != nil {
		return fmt.Errorf("--fix: %w", err)
	}
	res, err := job.Search(plan.Options{Fix: fix, Top: f.top})
	if err != nil {
		return err
	}
	if f.explain != "" {
		return explainPlan(w, job, res, f)
	}
	if f.json {
		return writeJSON(w, job.Report(res))
	}
	_, err = io.WriteString(w, job.Table(res))
	return err
}

func planJob(f planFlags) (plan.Job, error) {
	switch {
	case f.model == "":
		return plan.Job{}, errors.New("plan: --model is required")
	case f.cluster == "":
		return plan.Job{}, errors.New("plan: --cluster is required")
	case f.seq <= 0:
		return plan.Job{}, errors.New("plan: --seq is required (tokens per sequence)")
	case f.batch <= 0:
		return plan.Job{}, errors.New("plan: --global-batch is required (sequences per step)")
	}
	m, err := loadModel(f.model)
	if err != nil {
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
	data, err := os.ReadFile(s)
	if err != nil {
		return plan.Model{}, err
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
	data, err := os.ReadFile(s)
	if err != nil {
		return plan.Cluster{}, err
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
		_, err = io.WriteString(w, job.Explain(p, best))
		return err
	}
	out := struct {
		Plan   plan.PlanJSON      `json:"plan"`
		Valid  bool               `json:"valid"`
		Fits   bool               `json:"fits"`
		Reason string             `json:"reason,omitempty"`
		Est    *plan.EstimateJSON `json:"estimate,omitempty"`
		Best   *plan.EstimateJSON `json:"best,omitempty"`
		Text   string             `json:"text"`
	}{Plan: p.JSON(), Text: job.Explain(p, best)}
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
