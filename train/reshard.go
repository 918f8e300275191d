package train

import (
	"fmt"
	"path/filepath"
	"slices"

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
// sample) with no state to carry. So a resumed run under another plan
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
