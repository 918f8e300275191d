package train

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"trellis/checkpoint"
	"trellis/model"
)

// Resharding. A checkpoint is indexed by global tensor: every shard names
// the global tensor it belongs to, its shape, and the elements it holds
// (a range of the flattening, or a range of an N-d box under tensor
// parallelism). Each strategy's Restore asks for the global elements its
// own layout holds (flat.Read), whatever layout wrote them, so a run may
// resume under any plan: another dp, ZeRO stage, tp, pp or vpp split.
//
// The rest of the state is global and plan-free: the optimizer step count
// and the data position (Meta: samples of the global training order
// consumed, see data.Slice; a step reads samples [p, p+G) whatever dp and
// micro_batch are) and the dropout masks, keyed by (seed, step, global
// sample) with no state to carry. Delayed fp8 scaling's amax histories
// are global tensors too, one pair a block (fp8state.go: their dy amaxes
// scaled by the plans' dp·cp ratio). So a resumed run under another plan
// continues the same trajectory up to fp32 reduction order, and under the
// same plan bit for bit.

// checkResumable says, in one line naming the index file, why the
// checkpoint cannot give this model its state: a tensor missing, or of
// another shape (the element type is the strategies' to convert). Every parameter and its two Adam moments must be
// there as global tensors.
func checkResumable(c *checkpoint.Checkpoint, cfg model.Config) error {
	path := filepath.Join(c.Dir(), checkpoint.IndexName)
	ix := c.Index()
	for _, u := range cfg.Layout().Units {
		for _, t := range u.Tensors {
			for _, prefix := range []string{"", "optim.m.", "optim.v."} {
				name := prefix + t.Name
				e, ok := ix.Tensors[name]
				switch {
				case !ok:
					return fmt.Errorf("--resume: %s: no tensor %q, which the model (%s) needs", path, name, describe(cfg))
				case !slices.Equal(e.Shape, t.Shape):
					return fmt.Errorf("--resume: %s: tensor %q has shape %v, the model (%s) wants %v", path, name, e.Shape, describe(cfg), t.Shape)
				}
			}
		}
	}
	return nil
}

// describe names a model's shape for messages.
func describe(cfg model.Config) string {
	return fmt.Sprintf("layers=%d hidden=%d heads=%d vocab=%d seq_len=%d", cfg.Layers, cfg.Hidden, cfg.Heads, cfg.Vocab, cfg.SeqLen)
}

// FitWorld re-derives the plan for a world of n ranks, as an elastic
// launcher asks (launch.Env.Elastic): the data-parallel degree becomes
// n / (tp·pp·cp) and every other key of parallel.plan stays; the global
// batch stays too, so each step accumulates G / (dp'·micro_batch)
// micro-batches instead of G / (dp·micro_batch). A resume then reshards
// the checkpoint onto the new plan (Restore). It returns a line for the
// log saying what changed ("" when the plan already fits n), or a
// one-line error naming why the plan cannot shrink onto n ranks.
func (j *Job) FitWorld(n int) (string, error) {
	p, err := j.EnginePlan()
	if err != nil {
		return "", err
	}
	if p.Devices() == n {
		return "", nil
	}
	rest := p.TP * p.PP * p.CP
	if n < 1 || n%rest != 0 {
		return "", fmt.Errorf("parallel.plan %s cannot run on %d workers: the world must be a multiple of tp×pp×cp = %d", p.Short(), n, rest)
	}
	dp, gb, mb := n/rest, j.Train.GlobalBatch, j.Train.MicroBatch
	if mb < 1 || gb%(dp*mb) != 0 {
		return "", fmt.Errorf("parallel.plan %s cannot run on %d workers: train.global_batch=%d is not a multiple of dp=%d × train.micro_batch=%d", p.Short(), n, gb, dp, mb)
	}
	old := j.Parallel.Plan
	j.Parallel.Plan = withDP(old, dp)
	if j.Parallel.Devices != 0 {
		j.Parallel.Devices = n
	}
	return fmt.Sprintf("parallel.plan=%s: elastic: %q re-derived for %d workers (dp %d→%d; train.global_batch=%d kept, %d micro-batches per step instead of %d)",
		j.Parallel.Plan, old, n, p.DP, dp, gb, gb/(dp*mb), gb/(p.DP*mb)), nil
}

// withDP is plan text with its dp key set to dp (added when absent).
func withDP(text string, dp int) string {
	var out []string
	found := false
	for _, item := range strings.Split(text, ",") {
		if k, _, _ := strings.Cut(item, "="); strings.TrimSpace(k) == "dp" {
			item, found = fmt.Sprintf("dp=%d", dp), true
		}
		if strings.TrimSpace(item) != "" {
			out = append(out, item)
		}
	}
	if !found {
		out = append([]string{fmt.Sprintf("dp=%d", dp)}, out...)
	}
	return strings.Join(out, ",")
}
