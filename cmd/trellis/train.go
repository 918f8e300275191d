package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"trellis/comm"
	"trellis/comm/tcp"
	"trellis/config"
	"trellis/launch"
	"trellis/train"
)

type trainFlags struct {
	config, resume, metrics string
	sets                    []string
	parallel, deviceMemory  string
	devices, until          int
	backend                 string
	dashboard               string // listen address of the live dashboard (dashboard.go)
}

func newTrainCmd() *cobra.Command {
	var f trainFlags
	c := &cobra.Command{
		Use:   "train",
		Short: "Train a GPT (defaults: the embedded novel, on this machine)",
		Long: `Train a GPT-style model under a parallel plan.

The job is the embedded defaults, then --config FILE (TOML sections [model]
[parallel] [train] [data] [checkpoint]), then each --set section.key=value,
then the shorthand flags. With --resume and no --config, the checkpoint's own
job is the starting point.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runTrain(cmd, f) },
	}
	fl := c.Flags()
	fl.StringVar(&f.config, "config", "", "TOML job file")
	fl.StringArrayVar(&f.sets, "set", nil, "override one key, section.key=value (repeatable)")
	fl.StringVar(&f.parallel, "parallel", "", `plan text, e.g. "dp=4,zero=3" (= --set parallel.plan=...)`)
	fl.IntVar(&f.devices, "devices", 0, "number of ranks (= --set parallel.devices=N)")
	fl.StringVar(&f.deviceMemory, "device-memory", "", "every rank's memory budget, e.g. 512MiB (= --set parallel.device_memory=...)")
	fl.StringVar(&f.backend, "backend", "", "local (goroutines), tcp (processes under trellis launch) or auto")
	fl.StringVar(&f.resume, "resume", "", "continue from this checkpoint (a step directory or a checkpoint root)")
	fl.IntVar(&f.until, "until", 0, "stop after this step, checkpointing first")
	fl.StringVar(&f.metrics, "metrics", "", "write one JSON object per step to this file")
	fl.StringVar(&f.dashboard, "dashboard", "", "serve a live dashboard at this address while training, e.g. :8080")
	return c
}

func runTrain(cmd *cobra.Command, f trainFlags) error {
	job := train.DefaultJob()
	if f.resume != "" {
		m, err := train.LoadMeta(f.resume)
		if err != nil {
			return err
		}
		job = m.Job
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
	if err := config.Load(&job, f.config, sets); err != nil {
		return err
	}
	if err := job.Check(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	world, err := tcpWorld(job.Parallel.Backend)
	if err != nil {
		return err
	}
	if world != nil {
		defer world.Close()
	}
	quiet := world != nil && world.Rank() != 0
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	opts := train.Options{Job: job, Resume: f.resume, Until: f.until, Log: log, Out: os.Stdout, World: world}
	if quiet {
		opts.Log, opts.Out = nil, nil
	}
	if !quiet && term.IsTerminal(int(os.Stderr.Fd())) {
		opts.Progress = os.Stderr
	}
	if f.metrics != "" && !quiet {
		mf := &lazyFile{path: f.metrics}
		defer mf.Close()
		opts.Metrics = mf
	}
	if f.dashboard != "" && !quiet {
		d, derr := startDashboard(f.dashboard, &opts, log)
		if derr != nil {
			return derr
		}
		defer func() { d.finish(err) }()
	}
	_, err = train.Run(ctx, opts)
	return err
}

// tcpWorld joins the process world when the backend asks for it (tcp, or
// auto inside a launch environment); nil means ranks are goroutines here.
func tcpWorld(backend string) (comm.Group, error) {
	env, envErr := launch.WorkerEnv()
	switch backend {
	case "tcp":
		if envErr != nil {
			return nil, fmt.Errorf("parallel.backend=tcp: %w (start it with trellis launch, torchrun-style variables, Slurm or Open MPI)", envErr)
		}
	case "auto":
		if envErr != nil {
			return nil, nil
		}
	default:
		return nil, nil
	}
	cfg, err := env.TCPConfig(func(k string) (string, bool) { return os.LookupEnv(k) })
	if err != nil {
		return nil, err
	}
	return tcp.New(cfg)
}

// lazyFile creates its file on the first write, so a run that fails its
// checks overwrites nothing.
type lazyFile struct {
	path string
	f    *os.File
	err  error
}

func (l *lazyFile) Write(p []byte) (int, error) {
	if l.f == nil && l.err == nil {
		l.f, l.err = os.Create(l.path)
	}
	if l.err != nil {
		return 0, l.err
	}
	return l.f.Write(p)
}

func (l *lazyFile) Close() error {
	if l.f == nil {
		return nil
	}
	return l.f.Close()
}

var _ io.WriteCloser = (*lazyFile)(nil)
