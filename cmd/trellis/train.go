package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"trellis/comm/world"
	"trellis/hf"
	"trellis/launch"
	"trellis/train"
)

type trainFlags struct {
	config, resume, metrics string
	sets                    []string
	parallel, deviceMemory  string
	devices, until          int
	backend                 string
	trace                   string
	dashboard               string // listen address of the live dashboard (dashboard.go)
	dryRun                  bool
}

func newTrainCmd() *cobra.Command {
	var f trainFlags
	c := &cobra.Command{
		Use:   "train",
		Short: "Train a GPT (defaults: the embedded novel, on this machine)",
		Long: `Train a GPT-style model under a parallel plan.

The job is the embedded defaults, then --config FILE (TOML sections [model]
[parallel] [train] [data] [checkpoint]), then each --set section.key=value,
then the shorthand flags. With --resume, the checkpoint's own job is the
starting point, and the run writes next to that checkpoint.

A checkpoint directory belongs to one run: with no checkpoint.dir a run
writes to runs/trellis (runs/trellis-2, ... when that holds another run's
checkpoints); a directory holding another run's checkpoints is refused.
Ctrl-C stops after the current step, checkpoints, and prints the command that
resumes; a second Ctrl-C aborts. Under a launcher (trellis launch, torchrun,
Slurm, Open MPI) every process is one rank and the world size decides the
plan unless one is given.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runTrain(cmd, f) },
	}
	fl := c.Flags()
	fl.StringVar(&f.config, "config", "", "TOML job file")
	fl.StringArrayVar(&f.sets, "set", nil, "override one key, section.key=value (repeatable)")
	fl.StringVar(&f.parallel, "parallel", "", `plan text, e.g. "dp=4,zero=3", or "auto": the planner's fastest plan that fits (= --set parallel.plan=...)`)
	fl.IntVar(&f.devices, "devices", 0, "number of ranks (= --set parallel.devices=N)")
	fl.StringVar(&f.deviceMemory, "device-memory", "", "every rank's memory budget, e.g. 512MiB (= --set parallel.device_memory=...)")
	fl.StringVar(&f.backend, "backend", "", "the ranks' transport: "+world.Help()+"; default auto")
	fl.StringVar(&f.resume, "resume", "", "continue from this checkpoint (a step directory or a checkpoint root)")
	fl.IntVar(&f.until, "until", 0, "stop after this step, checkpointing first")
	fl.StringVar(&f.metrics, "metrics", "", "write one JSON object per step to this file (a resumed run appends)")
	fl.BoolVar(&f.dryRun, "dry-run", false, "print the planner's prediction for the job (memory per rank and tag, step time) and exit")
	fl.StringVar(&f.trace, "trace", "", "write a Chrome trace-event timeline (Perfetto) of every rank to DIR/trace.json (a resumed run appends to it)")
	fl.StringVar(&f.dashboard, "dashboard", "", "serve a live dashboard at this address while training, e.g. :8080")
	return c
}

func runTrain(cmd *cobra.Command, f trainFlags) error {
	switch {
	case f.devices < 0:
		return configError{fmt.Errorf("--devices=%d must be >= 1 (0 or absent: as many as the plan needs)", f.devices)}
	case f.until < 0:
		return configError{fmt.Errorf("--until=%d must be >= 0 (0 or absent: run to train.steps)", f.until)}
	}
	sets := append([]string(nil), f.sets...)
	if f.parallel != "" {
		sets = append(sets, "parallel.plan="+f.parallel)
	}
	if cmd.Flags().Changed("devices") {
		sets = append(sets, fmt.Sprintf("parallel.devices=%d", f.devices))
	}
	if f.deviceMemory != "" {
		sets = append(sets, "parallel.device_memory="+f.deviceMemory)
	}
	if f.backend != "" {
		sets = append(sets, "parallel.backend="+f.backend)
	}
	var env *launch.Env
	if e, err := launch.WorkerEnv(); err == nil {
		env = &e
	}
	spec, err := assembleJob(f, sets, env)
	if err != nil {
		return configError{err}
	}
	job := spec.job
	useCachedProfile(&job)
	if job.Parallel.Plan == train.Auto {
		if err := choosePlan(&job, env); err != nil {
			return err
		}
	}
	if f.dryRun {
		return job.DryRun(os.Stdout)
	}
	if err := job.Check(); err != nil {
		return configError{err}
	}
	if err := checkLauncher(job, env); err != nil {
		return configError{err}
	}
	if f.metrics != "" {
		if err := checkOutputFile("--metrics", f.metrics); err != nil {
			return err
		}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	w, err := openWorld(job.Parallel.Backend, env, log)
	if err != nil {
		return err
	}
	defer w.Close()
	world := w.Group
	rank0 := world == nil || world.Rank() == 0
	voice := rank0 || (env != nil && env.LocalRank == 0)
	if world != nil && rank0 {
		log.Info("world", "backend", w.Backend, "ranks", world.Size())
	}
	ctx, graceful, stop := interruptContext(voice)
	defer stop()
	opts := train.Options{Job: job, Resume: f.resume, Until: f.until, Log: log, Out: os.Stdout, World: world, Report: voice, Trace: f.trace, Stop: graceful}
	if !voice {
		opts.Log, opts.Out = nil, nil
	}
	for _, n := range spec.notes {
		if voice {
			log.Info("default", "note", n)
		}
	}
	if voice && term.IsTerminal(int(os.Stderr.Fd())) {
		opts.Progress = os.Stderr
	}
	if f.metrics != "" && rank0 {
		mf := &metricsFile{path: f.metrics, after: spec.resumeStep}
		defer mf.Close()
		opts.Metrics = mf
	}
	if f.dashboard != "" && rank0 {
		d, derr := startDashboard(f.dashboard, &opts, log)
		if derr != nil {
			return derr
		}
		defer func() { d.finish(err) }()
	}
	sum, err := train.Run(ctx, opts)
	if err == nil && sum != nil && voice {
		dropless := job.Model
		dropless.CapacityFactor = 0
		fmt.Fprint(opts.Out, nextSteps(sum.Checkpoint, f.metrics, job.Train.Prompt, hf.Exportable(dropless) == nil, job.Model.CapacityFactor > 0))
	}
	var intr *train.Interrupted
	if errors.As(err, &intr) && intr.Checkpoint != "" {
		resume := "trellis train --resume " + intr.Checkpoint
		if f.metrics != "" {
			resume += " --metrics " + f.metrics
		}
		if env != nil {
			resume += " (under the same launcher)"
		}
		return fmt.Errorf("%w; resume with: %s", err, resume)
	}
	return err
}

// interruptContext is cancelled by the first Ctrl-C (or SIGTERM): the run
// stops at the end of the step, checkpointing first. A second one exits at
// once.
func interruptContext(say bool) (context.Context, <-chan struct{}, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	done, graceful := make(chan struct{}), make(chan struct{})
	go func() {
		select {
		case s := <-sig:
			if s == syscall.SIGTERM { // a scheduler's or the launcher's hard stop
				if say {
					fmt.Fprintln(os.Stderr, "trellis: terminated: stopping now")
				}
				cancel()
				return
			}
		case <-done:
			return
		}
		if say {
			fmt.Fprintln(os.Stderr, "trellis: interrupted: stopping after this step (checkpointing first when checkpoint.dir is set); interrupt again to abort at once")
		}
		close(graceful)
		select {
		case s := <-sig:
			if s == syscall.SIGTERM {
				cancel()
				return
			}
			fmt.Fprintln(os.Stderr, "trellis: aborted")
			os.Exit(130)
		case <-done:
		}
	}()
	return ctx, graceful, func() {
		signal.Stop(sig)
		close(done)
		cancel()
	}
}

// openWorld joins the process world of parallel.backend through the
// backend registry (comm/world); a nil Group means the ranks are
// goroutines of this process. log gets auto's fallback warning.
func openWorld(backend string, env *launch.Env, log *slog.Logger) (*world.World, error) {
	if backend == "" {
		backend = "auto"
	}
	cfg := world.Config{Log: log}
	if env != nil {
		cfg.Placement = placement(*env)
	} else {
		_, cfg.Unplaced = launch.WorkerEnv()
	}
	w, err := world.Open(backend, cfg)
	if err != nil {
		return nil, fmt.Errorf("parallel.backend=%s: %w", backend, err)
	}
	return w, nil
}

// placement is a launched worker's place in comm/world's terms.
func placement(e launch.Env) *world.Placement {
	return &world.Placement{Rank: e.Rank, Size: e.WorldSize, LocalRank: e.LocalRank, LocalSize: e.LocalWorldSize,
		NodeRank: e.NodeRank, MasterAddr: e.MasterAddr, MasterPort: e.MasterPort, Source: e.Source}
}

// nextSteps is what the end of a run suggests: sample and (export: the
// model has a Hugging Face form, hf.Exportable; dropless: with --dropless,
// its capacity factor dropped) export the checkpoint it wrote, and report
// the metrics it kept.
func nextSteps(ckpt, metricsPath, prompt string, export, dropless bool) string {
	var b strings.Builder
	if ckpt != "" {
		if prompt == "" {
			prompt = "It is"
		}
		fmt.Fprintf(&b, "  trellis sample --checkpoint %s --prompt %q   # generate text\n", ckpt, prompt)
		if export {
			flag := ""
			if dropless {
				flag = " --dropless"
			}
			fmt.Fprintf(&b, "  trellis export --checkpoint %s --out %s-hf%s   # Hugging Face safetensors + config.json\n", ckpt, strings.TrimRight(ckpt, "/"), flag)
		}
	}
	if metricsPath != "" {
		fmt.Fprintf(&b, "  trellis report %s -o report.html   # charts of the run (add --trace DIR for a timeline)\n", metricsPath)
	} else {
		b.WriteString("  (run with --metrics run.jsonl, then trellis report run.jsonl -o report.html, for charts of the run)\n")
	}
	return "\nnext:\n" + b.String()
}
