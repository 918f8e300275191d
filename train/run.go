package train

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"

	"trellis/checkpoint"
	"trellis/comm"
	"trellis/comm/local"
	"trellis/data"
	"trellis/metrics"
)

// Options is everything Run needs.
type Options struct {
	Job Job
	// Resume continues from this checkpoint (a step directory or a
	// checkpoint root, whose latest step is used); "" starts afresh.
	Resume string
	// Until ends the run after this many completed steps, checkpointing
	// first, so one schedule of train.steps can span several allocations.
	// 0 runs to train.steps.
	Until int
	// Metrics receives one JSON object per step (nil: none).
	Metrics io.Writer
	// Log receives structured progress lines (nil: discarded).
	Log *slog.Logger
	// Out receives samples and the end-of-run summary for people (nil: discarded).
	Out io.Writer
	// Progress, if set, draws a progress bar there instead of logging
	// every train.log_every steps.
	Progress io.Writer
	// World is this process's world group when ranks are processes
	// (comm/tcp); nil runs every rank as a goroutine here (comm/local).
	World comm.Group
	// Trace, if set, is a directory: each rank writes trace.rank<N>.json
	// there and, when the ranks are goroutines of this process, they are
	// merged into trace.json (trellis trace merge does it for processes).
	Trace string
	// Report, with World set, makes this process report (log lines,
	// progress, samples, the summary) although it is not rank 0: a node's
	// local rank 0, as torchrun users expect. Metrics stay rank 0's.
	Report bool
	// Stop, when closed, stops the run gracefully: every rank finishes the
	// step under way, the step is checkpointed (when checkpoint.dir is
	// set) and Run returns *Interrupted. Cancelling Run's context instead
	// aborts at once: the inner loops (micro-batches, units) see it.
	Stop <-chan struct{}
	// Observer, if set, sees rank 0's reports as they happen (observe.go).
	Observer Observer
	// expertBias, set by this package's tests alone, are the MoE blocks'
	// starting expert biases (router_expert_bias) of a fresh run, by
	// block, in place of zeros: a forced imbalance.
	expertBias map[int][]float32
}

// Summary is what a run reports at its end.
type Summary struct {
	FirstStep, LastStep int     // steps completed before and after this run
	Loss                float64 // training loss of the last step
	ValLoss             float64 // last validation loss (NaN: none)
	TokensPerSec        float64 // median over the run's steps
	MFU                 float64 // median, against Peak
	Peak                string  // MFU's denominator: FLOP/s and where it comes from (runPeak)
	Ranks               []RankStats
	Checkpoint          string // the last checkpoint written ("" if none)
	Sample              string // the last generated sample
	Plan                string
	StepSeconds         float64 // median step time
	ExposedSeconds      float64 // median over steps of the ranks' mean wait for collectives
	RingSeconds         float64 // … of the ranks' mean wait for the ring attention's transfers (cp)
	EPSeconds           float64 // the same of its expert-parallel all-to-alls (RankStats.EPWait; 0 without ep)
	// Medians over steps of the ranks' mean compute, bubble and misc
	// (train/split.go).
	ComputeSeconds, BubbleSeconds, MiscSeconds float64
	Prediction                                 *Prediction // the planner's prediction (nil: none)
	// SkippedSteps counts this run's steps whose fp16 gradients overflowed
	// and were skipped (the loss scale halved), LossScale the scale the
	// last step ran at (0: not fp16).
	SkippedSteps int
	LossScale    float64
	// Experts is an MoE model's routing over the last step (nil: dense).
	Experts *metrics.Experts
}

// RankStats is one rank's memory and communication over the run.
type RankStats struct {
	Rank     int
	Peak     [6]int64 // peak bytes per device tag: param, grad, optim, act, workspace, comm
	PeakAll  int64    // peak bytes of all tags together
	CommBusy time.Duration
	CommWait time.Duration // exposed: the steps' waits on collectives (a pipeline's transfers are in Bubble)
	RingWait time.Duration // the part of CommWait that is the ring attention's (cp)
	// The rest of the steps' wall time on the rank (train/split.go):
	// forward and backward, a pipeline's waits on its neighbours, and
	// everything else (data, optimizer, bookkeeping). Compute + CommWait +
	// Bubble + Misc is the sum of the rank's step times.
	Compute, Bubble, Misc time.Duration
	Steps                 time.Duration // the rank's step times, summed
	// PeerWait is the part of Compute spent in collectives before their
	// groups' last members arrived (comm.Stats.Skew; 0 where the backend
	// cannot tell), and in waits whose share of the cores ran the other
	// ranks' work where the process's ranks outnumber its cores
	// (comm.Stats.Crowded).
	PeerWait time.Duration
	// EPWait is the part of CommWait spent in expert parallelism's
	// all-to-alls (the count exchanges and the rows' all-to-all-v's) once
	// the group's members had arrived (split.go's epWait; 0 without ep).
	EPWait time.Duration

	// CommBytes are the payload bytes passed to collectives per mesh axis.
	CommBytes CommBytes
}

// Run trains the job: every rank of the world, as goroutines (local), or
// this process's rank (tcp, when Options.World is set).
func Run(ctx context.Context, o Options) (*Summary, error) {
	var err error
	if o.Job, err = o.Job.Normalized(); err != nil {
		return nil, err
	}
	s, err := o.Job.resolve()
	if err != nil {
		return nil, err
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if s.peak, s.peakSrc, err = o.Job.runPeak(s); err != nil {
		return nil, err
	}
	s.processes = o.World != nil
	loader, err := data.NewLoader(data.LoaderConfig{Data: o.Job.Data, SeqLen: o.Job.Model.SeqLen, Vocab: o.Job.Model.Vocab, Seed: o.Job.Train.Seed, Log: o.Log})
	if err != nil {
		return nil, err
	}
	res, err := prepareResume(o, s)
	if err != nil {
		return nil, err
	}
	if res == nil {
		if s.init, err = o.Job.loadInit(o.Log); err != nil {
			return nil, err
		}
	}
	if o.World != nil {
		if o.World.Size() != s.ranks {
			return nil, fmt.Errorf("train: the plan %s needs %d ranks, the launch started %d", s.enginePlan.Short(), s.ranks, o.World.Size())
		}
		var lock *checkpoint.Lock
		if s.runID, lock, err = claimAgreed(o, res); err != nil {
			return nil, err
		}
		defer lock.Release()
		sum, err := runRank(ctx, o, s, loader, res, o.World)
		return sum, oomHint(err, o.Job, s)
	}
	var lock *checkpoint.Lock
	if s.runID, lock, err = claimDir(o.Job, res); err != nil {
		return nil, err
	}
	defer lock.Release()
	var link *local.LinkModel
	if s.linkBW > 0 || s.linkLat > 0 {
		l := local.Link{Bandwidth: s.linkBW, Latency: s.linkLat}
		// Under expert parallelism a rank's messages to a peer share one
		// link whatever their group: ep_overlap=on's two ep groups then
		// contend for it as on one port (the plain run's single ep group
		// sends one all-to-all at a time, so it is timed as before).
		ep, _ := s.enginePlan.Experts()
		link = &local.LinkModel{Intra: l, Inter: l, SharedPorts: ep > 1}
	}
	groups, err := local.New(local.Config{Size: s.ranks, Timeout: s.timeout, Link: link, Poll: local.PollFor(s.ranks*s.threads, runtime.GOMAXPROCS(0))})
	if err != nil {
		return nil, err
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		errs  = make([]error, s.ranks)
		out   *Summary
		fails sync.Once
	)
	for r := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sum, err := runRank(ctx, o, s, loader, res, groups[r])
			mu.Lock()
			defer mu.Unlock()
			errs[r] = err
			if r == 0 {
				out = sum
			}
			if err != nil {
				// Peers blocked in collectives with this rank fail at once
				// instead of waiting for the timeout.
				fails.Do(func() {
					for _, g := range groups {
						g.Close()
					}
				})
			}
		}()
	}
	wg.Wait()
	for _, g := range groups {
		g.Close()
	}
	if err := firstCause(errs); err != nil {
		return nil, oomHint(err, o.Job, s)
	}
	return out, mergeTrace(o)
}

// firstCause prefers an error that is not a consequence of another rank's
// failure (a closed group, a failed peer).
func firstCause(errs []error) error {
	var first error
	for r, err := range errs {
		if err == nil {
			continue
		}
		if isWholeRun(err) {
			return err
		}
		if len(errs) > 1 {
			err = fmt.Errorf("rank %d: %w", r, err)
		}
		if !errors.Is(err, comm.ErrClosed) && !errors.Is(err, comm.ErrPeer) {
			return err
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// resumeState is what a checkpoint gives a run to continue from.
type resumeState struct {
	ckpt  *checkpoint.Checkpoint
	meta  Meta
	notes []func(*slog.Logger) // logged by the reporting rank once restored
}

// note keeps a log line for after the restore, so that a resume that fails
// reading its checkpoint prints its error alone.
func (r *resumeState) note(level slog.Level, msg string, args ...any) {
	r.notes = append(r.notes, func(l *slog.Logger) { l.Log(context.Background(), level, msg, args...) })
}

// Meta is the trainer's part of a checkpoint's index.
type Meta struct {
	Job      Job           `json:"job"`
	Step     int           `json:"step"` // optimizer steps completed
	Position data.Position `json:"position"`
	OptSteps int           `json:"opt_steps"`
	Loss     float64       `json:"loss"`
	// RunID identifies the run across resumptions (see claimDir); empty
	// in checkpoints written before run identities existed.
	RunID string `json:"run_id,omitempty"`
	// fp16's loss scaler (absent for other precisions): the scale, the
	// clean steps since it last changed, and the steps skipped so far.
	LossScale      float64 `json:"loss_scale,omitempty"`
	LossScaleClean int     `json:"loss_scale_clean,omitempty"`
	SkippedSteps   int     `json:"skipped_steps,omitempty"`
}

func prepareResume(o Options, s settings) (*resumeState, error) {
	if o.Until < 0 {
		return nil, fmt.Errorf("--until=%d must be >= 0 (0: run to train.steps)", o.Until)
	}
	if o.Resume == "" {
		if o.Until > 0 && o.Job.Checkpoint.Dir == "" {
			return nil, errors.New("--until needs checkpoint.dir: the run checkpoints before it stops")
		}
		return nil, nil
	}
	c, err := checkpoint.OpenRanges(o.Resume) // each rank reads what it holds
	if err != nil {
		return nil, err
	}
	var m Meta
	if err := c.DecodeMeta(&m); err != nil {
		return nil, err
	}
	if err := sameRun(m.Job, o.Job); err != nil {
		return nil, fmt.Errorf("--resume %s: %w", c.Dir(), err)
	}
	if err := checkResumable(c, o.Job.Model); err != nil {
		return nil, err
	}
	res := &resumeState{ckpt: c, meta: m}
	if plan := s.enginePlan.String(); c.Plan() != plan || c.World() != s.ranks {
		res.note(slog.LevelInfo, "resharding", "checkpoint", c.Dir(), "from", fmt.Sprintf("%s (world %d)", c.Plan(), c.World()), "to", fmt.Sprintf("%s (world %d)", plan, s.ranks))
	}
	fp8ResumeNotes(res, s, o.Job)
	if m.Step >= o.Job.Train.Steps {
		return nil, fmt.Errorf("--resume %s: the checkpoint is at step %d, train.steps=%d: nothing left to run (raise train.steps to extend the run)", c.Dir(), m.Step, o.Job.Train.Steps)
	}
	if was := m.Job.Train.Steps; was != o.Job.Train.Steps {
		res.note(slog.LevelWarn, "schedule changed", "train.steps", fmt.Sprintf("%d -> %d", was, o.Job.Train.Steps),
			"note", fmt.Sprintf("the learning rate from step %d follows the cosine schedule of %d steps", m.Step+1, o.Job.Train.Steps))
	}
	return res, nil
}

// sameRun checks that a resumed job continues the checkpoint's run: the
// same model, data order and learning rates, or the result would not be the
// run the checkpoint belongs to. train.steps may change: the cosine
// schedule is restated over the new total (prepareResume says so).
func sameRun(a, b Job) error {
	type field struct {
		name string
		x, y any
	}
	for _, f := range []field{
		{"model", a.Model, b.Model},
		{"train.global_batch", a.Train.GlobalBatch, b.Train.GlobalBatch},
		{"train.seed", a.Train.Seed, b.Train.Seed},
		{"train.lr", a.Train.LR, b.Train.LR},
		{"train.min_lr", a.Train.MinLR, b.Train.MinLR},
		{"train.warmup", a.Train.Warmup, b.Train.Warmup},
		{"data.source", a.Data.Source, b.Data.Source},
		{"data.tokenizer", a.Data.Tokenizer, b.Data.Tokenizer},
	} {
		if f.x != f.y {
			return fmt.Errorf("%s is %v in the checkpoint and %v now; a resumed run must keep it", f.name, f.x, f.y)
		}
	}
	return nil
}

// median of xs (NaN for none); xs is reordered.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	slices.Sort(xs)
	return xs[len(xs)/2]
}
