package train

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"trellis/checkpoint"
)

// claimDir decides, before step 1, whether this run may write checkpoints
// into checkpoint.dir, and records it there as the owner (run.json, unless
// it already names this run: where and when the run first started). It
// returns the run's identity: a new one for a fresh run, the checkpoint's
// for a resumed one, and the directory's lock, which the run holds until
// it ends (Release; nil without checkpoint.dir). The rules, so that no run
// loses another's work:
//
//   - the directory must be writable (or creatable);
//   - it has one writer: its lock (checkpoint.Acquire, an OS lock on a file
//     inside) is taken first, so a second run — fresh, or a resume of a
//     copy — is refused naming the holder's pid and run, and the checks
//     below see a directory nobody else writes; every save checks the lock
//     is still this run's (Store.Commit);
//   - a fresh run refuses a directory holding complete checkpoints: they
//     belong to another run, which it would replace and re-point latest;
//   - a resumed run refuses a directory owned by another run, and one
//     holding steps past the step it resumes from (continuing there would
//     re-point latest backwards and prune the later steps: a fork of a run
//     goes in its own directory).
func claimDir(j Job, res *resumeState) (id string, _ *checkpoint.Lock, err error) {
	id = checkpoint.NewRunID()
	if res != nil && res.meta.RunID != "" {
		id = res.meta.RunID
	}
	dir := j.Checkpoint.Dir
	if dir == "" {
		return id, nil, nil
	}
	if err := checkpoint.CheckWritable(dir); err != nil {
		return "", nil, err
	}
	held, err := checkpoint.Acquire(dir, id)
	if err != nil {
		return "", nil, err
	}
	defer func() {
		if err != nil {
			held.Withdraw() // the lock file as it was: a refusal changes nothing
		}
	}()
	steps, err := checkpoint.Steps(dir)
	if err != nil {
		return "", nil, err
	}
	owner, owned, err := checkpoint.ReadRun(dir)
	if err != nil {
		return "", nil, err
	}
	c := claim{dir: dir, steps: steps, owner: owner, owned: owned, id: id, from: -1}
	if res != nil {
		c.from, c.fromDir = res.meta.Step, res.ckpt.Dir()
		c.sameRoot = samePath(filepath.Dir(c.fromDir), dir)
	}
	if err := c.check(); err != nil {
		return "", nil, err
	}
	if owned && owner.ID == id {
		// Already recorded. Writing nothing here also keeps a resume whose
		// restore then fails (a corrupt shard, found when read) from
		// touching the directory's checkpoints.
		return id, held, nil
	}
	host, _ := os.Hostname()
	run := checkpoint.Run{ID: id, Started: time.Now().UTC().Format(time.RFC3339), Host: host, PID: os.Getpid()}
	if err := checkpoint.WriteRun(dir, run); err != nil {
		return "", nil, err
	}
	return id, held, nil
}

// claim is what claimDir found: the directory's complete steps and owner,
// and the run that wants it.
type claim struct {
	dir      string
	steps    []int // ascending
	owner    checkpoint.Run
	owned    bool   // dir has a run file
	id       string // the claiming run
	from     int    // the step it resumes from; -1: a fresh run
	fromDir  string // the checkpoint it resumes from
	sameRoot bool   // fromDir is a step of dir
}

// check applies claimDir's rules.
func (c claim) check() error {
	if len(c.steps) == 0 {
		return nil
	}
	last := c.steps[len(c.steps)-1]
	if c.from < 0 {
		who := "another run"
		if c.owned {
			who = "run " + c.owner.ID
		}
		return fmt.Errorf("checkpoint.dir=%s holds the checkpoints of %s (steps up to %d): a new run would replace them; continue it with --resume %s, or give this run its own directory (--set checkpoint.dir=runs/NAME)",
			c.dir, who, last, c.dir)
	}
	switch {
	case c.owned && c.owner.ID != c.id:
		return fmt.Errorf("checkpoint.dir=%s belongs to run %s, not to run %s that %s continues: set checkpoint.dir to this run's directory or a new one", c.dir, c.owner.ID, c.id, c.fromDir)
	case !c.owned && !c.sameRoot:
		return fmt.Errorf("checkpoint.dir=%s holds checkpoints of an unidentified run (no %s), not %s's: set checkpoint.dir to a new directory", c.dir, checkpoint.RunFile, c.fromDir)
	case last > c.from:
		return fmt.Errorf("checkpoint.dir=%s already holds step %d, past step %d that this run resumes from: continuing there would re-point latest and prune later steps; give this branch of the run its own directory (--set checkpoint.dir=runs/NAME)",
			c.dir, last, c.from)
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
