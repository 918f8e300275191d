package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"trellis/internal/bounded"
)

// Restarts configures RunRestarting: how often a failed job is started
// again and where its workers' checkpoints are.
type Restarts struct {
	// Max is the number of restarts allowed after worker failures (0: none,
	// as Run).
	Max int
	// Root is the checkpoint root the workers write (trellis train's
	// checkpoint.dir). A restart resumes from the step its latest file
	// names, by appending ResumeFlag and Root to the worker's arguments;
	// with no complete checkpoint yet, the job starts again from scratch.
	Root string
	// ResumeFlag is the worker's resume flag; default "--resume".
	ResumeFlag string
	// Log receives the launcher's own lines (default the job's Stderr).
	Log io.Writer
	// Started, when set, is called with every job started (for Abort).
	Started func(*Job)

	// MinProcs makes the job elastic (0: not): a dead worker's slot may be
	// given up and the job restarted with fewer workers, never fewer than
	// MinProcs (see RunRestarting). Only on one node.
	MinProcs int
	// SlotRestarts is how many times one slot's worker may fail and be
	// restarted at the same world size before an elastic job gives the
	// slot up (0: at its first failure).
	SlotRestarts int
}

// ExitConfig is the exit code with which a worker says the job cannot run
// as configured (trellis train: a plan that does not map onto the world,
// a global batch dp does not divide); the launcher does not restart a job
// that ends so, since a restart would fail the same way.
const ExitConfig = 2

// stepLine matches trellis train's per-step log line (its text handler),
// from which the launcher learns how far a job got.
var stepLine = regexp.MustCompile(`\bmsg=step step=(\d+)\b`)

// RunRestarting runs the job as Run does, and when a worker fails (not on
// cancellation) stops the others as Run does and starts the whole job
// again, up to r.Max times, resuming from the last complete checkpoint
// under r.Root. Each restart is logged in one line naming the dead rank
// and how it ended, the checkpoint resumed and the steps redone (those the
// workers had reported past that checkpoint). The schedule is the
// worker's own (the same arguments, train.steps included), so the resumed
// job ends where the first would have.
//
// Elastic (r.MinProcs > 0): every worker gets TRELLIS_ELASTIC=1, and when
// a slot's worker has failed more than r.SlotRestarts times the slot is
// given up: the job restarts with one worker fewer (ranks renumbered
// 0..W-2), as long as that leaves at least r.MinProcs; the worker
// re-derives its plan for the smaller world and resumes by resharding.
// The restart line then says which slot was lost and the new world. A
// worker that exits with ExitConfig ends the job (its reason is in its
// last lines).
func RunRestarting(ctx context.Context, cfg Config, r Restarts) error {
	if err := cfg.checkCounts(); err != nil { // before anything is sized by them
		return err
	}
	if r.Max < 0 {
		return fmt.Errorf("launch: --max-restarts=%d must be >= 0", r.Max)
	}
	if err := r.checkElastic(cfg); err != nil {
		return err
	}
	if r.MinProcs > 0 {
		cfg.Env = append(append([]string(nil), cfg.Env...), EnvElastic+"=1")
	}
	fails := make([]int, cfg.NProcPerNode) // per slot (rank), failures so far
	if r.Max > 0 && r.Root == "" {
		return errors.New("launch: --max-restarts needs the workers' checkpoint root (--checkpoint-dir, or --set checkpoint.dir=DIR in the worker's arguments) to resume from")
	}
	if r.ResumeFlag == "" {
		r.ResumeFlag = "--resume"
	}
	logw := r.Log
	if logw == nil {
		logw = cfg.Stderr
	}
	if logw == nil {
		logw = os.Stderr
	}
	base := append([]string(nil), cfg.Args...)
	var reached progress
	watch := cfg.Watch
	cfg.Watch = func(rank int, line string) {
		reached.see(line)
		if watch != nil {
			watch(rank, line)
		}
	}
	for attempt := 0; ; attempt++ {
		j, err := Start(ctx, cfg)
		if err != nil {
			return err
		}
		if r.Started != nil {
			r.Started(j)
		}
		err = j.Wait()
		var we *WorkerError
		if err == nil || !errors.As(err, &we) || ctx.Err() != nil || attempt >= r.Max || we.Code == ExitConfig {
			switch {
			case we != nil && we.Code == ExitConfig && r.Max > 0:
				err = fmt.Errorf("%w (the job cannot run as configured on %d workers: not restarted; see its last lines)", err, cfg.NProcPerNode)
			case we != nil && r.Max > 0:
				err = fmt.Errorf("%w (after %d of %d restarts)", err, attempt, r.Max)
			}
			return err
		}
		world := ""
		if we.Rank >= 0 && we.Rank < len(fails) {
			fails[we.Rank]++
			if r.MinProcs > 0 && fails[we.Rank] > r.SlotRestarts && cfg.NProcPerNode > r.MinProcs {
				world = fmt.Sprintf("slot %d lost after %d failure(s); the world shrinks from %d to %d workers (minimum %d), ranks renumbered; ",
					we.Rank, fails[we.Rank], cfg.NProcPerNode, cfg.NProcPerNode-1, r.MinProcs)
				fails = append(fails[:we.Rank], fails[we.Rank+1:]...)
				cfg.NProcPerNode--
			} else if r.MinProcs > 0 {
				world = fmt.Sprintf("same world of %d workers; ", cfg.NProcPerNode)
			}
		}
		step, dir, ok := latestStep(r.Root)
		cfg.Args = base
		what := "no complete checkpoint under " + r.Root + ": starting again from step 0"
		if ok {
			cfg.Args = append(append([]string(nil), base...), r.ResumeFlag, r.Root)
			what = fmt.Sprintf("resuming from checkpoint %s (step %d)", dir, step)
		}
		status := we.Status
		if n := we.BlameNote(); n != "" {
			status += "; " + n
		}
		fmt.Fprintf(logw, "trellis launch: rank %d died (%s); restart %d of %d: %s%s; %s\n",
			we.Rank, status, attempt+1, r.Max, world, what, redone(step, reached.get()))
		reached.reset()
	}
}

// checkElastic validates the elastic fields against the job, naming the
// flag and the rule.
func (r Restarts) checkElastic(cfg Config) error {
	switch {
	case r.MinProcs < 0:
		return fmt.Errorf("launch: --nproc-per-node minimum %d must be >= 1", r.MinProcs)
	case r.MinProcs == 0:
		return nil
	case r.Max == 0:
		return fmt.Errorf("launch: --nproc-per-node %d:%d (elastic) needs --max-restarts > 0", r.MinProcs, cfg.NProcPerNode)
	case r.MinProcs > cfg.NProcPerNode:
		return fmt.Errorf("launch: --nproc-per-node %d:%d: the minimum must not exceed the maximum", r.MinProcs, cfg.NProcPerNode)
	case max(cfg.NNodes, 1) > 1:
		return fmt.Errorf("launch: --nproc-per-node %d:%d with --nnodes=%d: elastic jobs run on one node", r.MinProcs, cfg.NProcPerNode, cfg.NNodes)
	case r.SlotRestarts < 0:
		return fmt.Errorf("launch: --max-slot-restarts=%d must be >= 0", r.SlotRestarts)
	}
	return nil
}

// redone says which steps the restart runs again: those past the
// checkpoint's step that the job had reported.
func redone(from, reached int) string {
	switch {
	case reached <= from:
		return "no steps redone"
	case reached == from+1:
		return fmt.Sprintf("step %d redone", reached)
	}
	return fmt.Sprintf("steps %d-%d redone (%d steps)", from+1, reached, reached-from)
}

// latestStep reads root's latest file: the step and its directory.
func latestStep(root string) (int, string, bool) {
	b, err := bounded.ReadFile(filepath.Join(root, "latest"), 4096, "latest file")
	if err != nil {
		return 0, "", false
	}
	name := strings.TrimSpace(string(b))
	n, err := strconv.Atoi(strings.TrimPrefix(name, "step-"))
	if err != nil || !strings.HasPrefix(name, "step-") {
		return 0, "", false
	}
	return n, filepath.Join(root, name), true
}

// progress is the highest step the workers reported.
type progress struct {
	mu   sync.Mutex
	step int
}

func (p *progress) see(line string) {
	m := stepLine.FindStringSubmatch(line)
	if m == nil {
		return
	}
	n, err := strconv.Atoi(m[1])
	if err != nil {
		return
	}
	p.mu.Lock()
	p.step = max(p.step, n)
	p.mu.Unlock()
}

func (p *progress) get() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.step
}

func (p *progress) reset() {
	p.mu.Lock()
	p.step = 0
	p.mu.Unlock()
}
