package train

import (
	"fmt"
	"log/slog"

	"trellis/checkpoint"
	"trellis/mesh"
	"trellis/model"
	"trellis/plan"
	"trellis/precision"
)

// Delayed scaling's state in a checkpoint. Each block's 4 linears × 3
// operands keep an amax history (model.GPT.FP8History); its amaxes are
// maxima over the data-, context- and tensor-parallel groups (fp8Sync),
// so between steps a block's histories are the whole tensors' — the one
// device's — on every rank that runs the block, whatever the plan. A
// checkpoint holds them as two global tensors a block,
//
//	fp8.layers.{l}.amax_history  [12, H]  each history's last H step amaxes, oldest first
//	fp8.layers.{l}.amax_scale    [12]     the scale each uses at the next step
//
// (rows in model.FP8Sites order: attention in, attention out, MLP in, MLP
// out, each x, w, dy), written by the rank at dp = cp = tp = 0 of the
// pipeline stage that runs block l, so once. Being plan-free they reshard
// by name alone: a resumed run under any dp, ZeRO stage, tp, cp, pp or
// vpp split loads each block's state on the ranks that now run it, and
// continues the same scales (bit for bit under the same plan, as the
// rest of the state does). The cases where the saved state is not the
// run's are logged, never silently used (fp8ResumeNotes): a checkpoint
// without it (another precision or recipe, or written before it was
// saved) starts fresh histories, the first step scaled by its current
// amaxes as a new run's is; another train.fp8_history keeps the newest
// amaxes and remakes the scales; another train.fp8_margin remakes the
// scales. One part does depend on the plan: a micro-batch's loss gradient
// is dp·cp/(G·T) a token (fp8GradRatio), so the dy histories are scaled
// by the ratio of the new plan's dp·cp to the saving one's and their
// scales remade (measured: a one-device checkpoint resumed under dp=2
// saves dy amaxes exactly twice the one device's, x and w within 1e-5).

func fp8HistoryName(l int) string { return fmt.Sprintf("fp8.layers.%d.amax_history", l) }
func fp8ScaleName(l int) string   { return fmt.Sprintf("fp8.layers.%d.amax_scale", l) }

// stageBlocks are the blocks this rank's stage runs (units 1…L of its
// layout are blocks 0…L−1): the blocks of its per-block state in a
// checkpoint (fp8 histories, expert biases).
func (r *rank) stageBlocks() []int {
	var ls []int
	for _, u := range r.top.layout.Units {
		if u >= 1 && u <= r.job.Model.Layers {
			ls = append(ls, u-1)
		}
	}
	return ls
}

// savesStageState says whether this rank writes its stage's per-block
// state to a checkpoint: the rank at dp = cp = tp = 0 of the stage (the
// stage's other ranks hold the same values).
func (r *rank) savesStageState() bool {
	c := r.top.coords
	return c.Get(mesh.DP) == 0 && c.Get(mesh.CP) == 0 && c.Get(mesh.TP) == 0
}

// readFloat32 is tensor name of c in float32.
func readFloat32(c *checkpoint.Checkpoint, name string) ([]float32, error) {
	s, err := c.ReadTensor(name)
	if err != nil {
		return nil, err
	}
	return s.Float32()
}

// fp8Shards are the delayed-scaling state this rank saves: its stage's
// blocks' histories on the rank at dp = cp = tp = 0, nothing elsewhere
// (the other ranks of the stage hold the same values) or without
// delayed scaling.
func (r *rank) fp8Shards() ([]checkpoint.Shard, error) {
	H := r.gpt.FP8HistoryLen()
	if H == 0 || !r.savesStageState() {
		return nil, nil
	}
	var out []checkpoint.Shard
	for _, l := range r.stageBlocks() {
		amax, scale := make([]float32, model.FP8Sites*H), make([]float32, model.FP8Sites)
		if err := r.gpt.FP8History(l, amax, scale); err != nil {
			return nil, err
		}
		out = append(out, checkpoint.Whole(fp8HistoryName(l), []int{model.FP8Sites, H}, amax),
			checkpoint.Whole(fp8ScaleName(l), []int{model.FP8Sites}, scale))
	}
	return out, nil
}

// restoreFP8 loads the delayed-scaling state of this rank's blocks from
// c, saved after m.Step steps; a block the checkpoint has none for keeps
// fresh histories (fp8ResumeNotes says so).
func (r *rank) restoreFP8(c *checkpoint.Checkpoint, m Meta) error {
	if r.gpt.FP8HistoryLen() == 0 {
		return nil
	}
	ix := c.Index()
	remake := m.Job.Train.FP8Margin != r.job.Train.FP8Margin
	dy, err := fp8GradRatio(c, r.set.enginePlan)
	if err != nil {
		return err
	}
	for _, l := range r.stageBlocks() {
		he, ok := ix.Tensors[fp8HistoryName(l)]
		se, ok2 := ix.Tensors[fp8ScaleName(l)]
		if !ok || !ok2 {
			continue
		}
		if len(he.Shape) != 2 || he.Shape[0] != model.FP8Sites || he.Shape[1] < 1 || len(se.Shape) != 1 || se.Shape[0] != model.FP8Sites {
			return fmt.Errorf("--resume: %s: tensors %q %v and %q %v: want shapes [%d, H] and [%d]", c.Dir(), fp8HistoryName(l), he.Shape, fp8ScaleName(l), se.Shape, model.FP8Sites, model.FP8Sites)
		}
		var v [2][]float32
		for i, name := range []string{fp8HistoryName(l), fp8ScaleName(l)} {
			var err error
			if v[i], err = readFloat32(c, name); err != nil {
				return fmt.Errorf("--resume: %w", err)
			}
		}
		if err := r.gpt.SetFP8History(l, v[0], v[1], m.Step, dy, remake); err != nil {
			return fmt.Errorf("--resume: %s: %w", c.Dir(), err)
		}
	}
	return nil
}

// fp8GradRatio is the ratio of a micro-batch's loss gradient under plan
// p to its size under the plan that wrote c, by which the saved dy
// amaxes are scaled. A rank's micro-batch of B sequences (T/cp tokens
// each) carries 1/accum of the step's loss, accum = G/(dp·B), its mean
// over the B·T/cp tokens, so each token's gradient is
//
//	1/(accum·B·T/cp) = dp·cp/(G·T)
//
// and the ratio is (dp·cp)/(dp'·cp') for the saving plan's dp', cp' (G
// and T are the run's: sameRun). A power of two when the degrees are, so
// the remade scales are then exactly the ones the new plan's own run
// makes (its dy is the old one's times the ratio, exactly).
func fp8GradRatio(c *checkpoint.Checkpoint, p plan.Plan) (float32, error) {
	was, err := plan.Parse(c.Plan())
	if err != nil {
		return 0, fmt.Errorf("--resume: %s: the checkpoint's plan %q: %w", c.Dir(), c.Plan(), err)
	}
	return float32(p.DP*p.CP) / float32(max(1, was.DP)*max(1, was.CP)), nil
}

// fp8ResumeNotes logs, for a delayed-scaling run resumed from c, where
// the checkpoint's fp8 state is not taken as it was saved: none saved
// (fresh histories), another history length or another margin.
func fp8ResumeNotes(res *resumeState, s settings, job Job) {
	if s.policy.F8.Recipe != precision.Delayed {
		return
	}
	c, was := res.ckpt, res.meta.Job.Train
	ix := c.Index()
	missing, H := 0, 0
	for l := range job.Model.Layers {
		e, ok := ix.Tensors[fp8HistoryName(l)]
		if _, ok2 := ix.Tensors[fp8ScaleName(l)]; !ok || !ok2 {
			missing++
			continue
		}
		if len(e.Shape) == 2 {
			H = e.Shape[1]
		}
	}
	if missing > 0 {
		res.note(slog.LevelWarn, "fp8 amax histories start fresh", "checkpoint", c.Dir(), "blocks", fmt.Sprintf("%d of %d", missing, job.Model.Layers),
			"reason", fmt.Sprintf("the checkpoint (plan %s, train.fp8_recipe=%q) holds no %s: it was not written by a delayed-scaling run that saves them; the first resumed step is scaled by its current amaxes, as a new run's first step is, so the run is not the uninterrupted one", c.Plan(), was.FP8Recipe, fp8HistoryName(0)))
	}
	if want := s.policy.F8.History; H != 0 && H != want {
		res.note(slog.LevelWarn, "fp8 amax histories resized", "checkpoint", c.Dir(), "train.fp8_history", fmt.Sprintf("%d -> %d", H, want),
			"note", fmt.Sprintf("the newest %d step amaxes are kept and the scales remade from them", min(H, want)))
	}
	if missing < job.Model.Layers && was.FP8Margin != job.Train.FP8Margin {
		res.note(slog.LevelWarn, "fp8 scales remade", "checkpoint", c.Dir(), "train.fp8_margin", fmt.Sprintf("%d -> %d", was.FP8Margin, job.Train.FP8Margin),
			"note", "the saved histories are kept and each scale remade with the new margin")
	}
}
