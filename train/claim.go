package train

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"trellis/checkpoint"
)

// claimDir decides, before step 1, whether this run may write checkpoints
// into checkpoint.dir, and records it there as the owner (run.json). It
// returns the run's identity: a new one for a fresh run, the checkpoint's
// for a resumed one. The rules, so that no run loses another's work:
//
//   - the directory must be writable (or creatable);
//   - a fresh run refuses a directory holding complete checkpoints: they
//     belong to another run, which it would replace and re-point latest;
//   - a resumed run refuses a directory owned by another run, and one
//     holding steps past the step it resumes from (continuing there would
//     re-point latest backwards and prune the later steps: a fork of a run
//     goes in its own directory).
func claimDir(j Job, res *resumeState) (string, error) {
	id := checkpoint.NewRunID()
	if res != nil && res.meta.RunID != "" {
		id = res.meta.RunID
	}
	dir := j.Checkpoint.Dir
	if dir == "" {
		return id, nil
	}
	if err := checkpoint.CheckWritable(dir); err != nil {
		return "", fmt.Errorf("checkpoint.dir=%s: %w", dir, err)
	}
	steps, err := checkpoint.Steps(dir)
	if err != nil {
		return "", err
	}
	owner, owned, err := checkpoint.ReadRun(dir)
	if err != nil {
		return "", err
	}
	if err := mayWrite(dir, steps, owner, owned, id, res); err != nil {
		return "", err
	}
	host, _ := os.Hostname()
	run := checkpoint.Run{ID: id, Started: time.Now().UTC().Format(time.RFC3339), Host: host, PID: os.Getpid()}
	return id, checkpoint.WriteRun(dir, run)
}

// mayWrite applies claimDir's rules to what dir holds.
func mayWrite(dir string, steps []int, owner checkpoint.Run, owned bool, id string, res *resumeState) error {
	if len(steps) == 0 {
		return nil
	}
	last := steps[len(steps)-1]
	if res == nil {
		who := "another run"
		if owned {
			who = "run " + owner.ID
		}
		return fmt.Errorf("checkpoint.dir=%s holds the checkpoints of %s (steps up to %d): a new run would replace them; continue it with --resume %s, or give this run its own directory (--set checkpoint.dir=runs/NAME)",
			dir, who, last, dir)
	}
	from := res.ckpt.Dir()
	sameRoot := samePath(filepath.Dir(from), dir)
	switch {
	case owned && owner.ID != id:
		return fmt.Errorf("checkpoint.dir=%s belongs to run %s, not to run %s that %s continues: set checkpoint.dir to this run's directory or a new one", dir, owner.ID, id, from)
	case !owned && !sameRoot:
		return fmt.Errorf("checkpoint.dir=%s holds checkpoints of an unidentified run (no %s), not %s's: set checkpoint.dir to a new directory", dir, checkpoint.RunFile, from)
	case last > res.meta.Step:
		return fmt.Errorf("checkpoint.dir=%s already holds step %d, past step %d that this run resumes from: continuing there would re-point latest and prune later steps; give this branch of the run its own directory (--set checkpoint.dir=runs/NAME)",
			dir, last, res.meta.Step)
	}
	return nil
}

// samePath reports whether a and b name the same directory.
func samePath(a, b string) bool {
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	if errA != nil || errB != nil {
		return filepath.Clean(a) == filepath.Clean(b)
	}
	return os.SameFile(sa, sb)
}
