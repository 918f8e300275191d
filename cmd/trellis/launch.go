package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/spf13/cobra"

	"trellis/comm/tcp"
	"trellis/internal/bounded"
	"trellis/launch"
)

// newLaunchCmd: trellis launch --nproc-per-node N [--nnodes M --node-rank R
// --master-addr A --master-port P] -- PROGRAM ARGS... (package launch does
// the work; see docs/LAUNCH.md).
func newLaunchCmd() *cobra.Command {
	var (
		cfg           launch.Config
		tokenFile     string
		restarts      launch.Restarts
		nproc, nnodes string
	)
	c := &cobra.Command{
		Use:   "launch [flags] -- PROGRAM [ARGS...]",
		Short: "Start one worker process per rank (torchrun-style)",
		Long: "Starts --nproc-per-node workers of PROGRAM on this node with RANK, WORLD_SIZE, LOCAL_RANK,\n" +
			"LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR, MASTER_PORT and TRELLIS_JOB_TOKEN set. Output is\n" +
			"prefixed with \"[rank R] \". If a worker fails, the others are stopped and launch exits non-zero\n" +
			"naming the rank, its exit status and its last lines. Ctrl-C is forwarded once to every worker\n" +
			"(trellis train stops after its step and checkpoints); a second Ctrl-C kills them. With\n" +
			"--max-restarts N, a failed job is instead restarted up to N times from its last complete\n" +
			"checkpoint (--resume DIR added to the worker's arguments), the log naming the dead rank,\n" +
			"the checkpoint and the steps redone. --nproc-per-node MIN:MAX makes the job elastic: a worker\n" +
			"that dies (more than --max-slot-restarts times) gives up its slot, and the job restarts with\n" +
			"one worker fewer, never under MIN; trellis train re-derives the plan's data-parallel degree\n" +
			"for the smaller world (same global batch, more accumulation) and resumes by resharding.\n\n" +
			"On one node the master defaults to 127.0.0.1 on a free port and a job token is generated.\n" +
			"With --nnodes > 1, every node runs launch with its --node-rank, the same --master-addr and\n" +
			"--master-port (default 29500), and the same token, from --token-file or TRELLIS_JOB_TOKEN.",
		Example: "  trellis launch --nproc-per-node 4 -- trellis train --parallel dp=4,zero=3 --backend auto\n" +
			"  trellis launch --nproc-per-node 2:4 --max-restarts 3 -- trellis train --set checkpoint.dir=ck\n" +
			"  TRELLIS_JOB_TOKEN=$SECRET trellis launch --nnodes 2 --node-rank 0 --nproc-per-node 8 \\\n" +
			"      --master-addr node0 -- ./worker",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if restarts.MinProcs, cfg.NProcPerNode, err = procRange(nproc); err != nil {
				return err
			}
			if cfg.NNodes, err = nodeCount(nnodes); err != nil {
				return err
			}
			cfg.Program, cfg.Args = workerProgram(args[0], exec.LookPath, os.Executable), args[1:]
			tok, err := launchToken(tokenFile)
			if err != nil {
				return err
			}
			if tok != "" {
				cfg.Token = tok
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			sig := make(chan os.Signal, 2)
			signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
			defer signal.Stop(sig)
			if restarts.Root == "" {
				restarts.Root = setValue(cfg.Args, "checkpoint.dir")
			}
			var (
				mu  sync.Mutex
				cur *launch.Job
			)
			restarts.Started = func(j *launch.Job) { mu.Lock(); cur = j; mu.Unlock() }
			go func() {
				<-sig
				fmt.Fprintln(os.Stderr, "trellis launch: interrupted: the workers stop after their current step; interrupt again to kill them")
				cancel()
				<-sig
				mu.Lock()
				defer mu.Unlock()
				if cur != nil {
					cur.Abort()
				}
			}()
			return launch.RunRestarting(ctx, cfg, restarts)
		},
	}
	c.Flags().SetInterspersed(false) // flags after PROGRAM belong to it
	f := c.Flags()
	f.StringVar(&nproc, "nproc-per-node", "1", "workers on this node; MIN:MAX (elastic, one node): start MAX, shrink to no fewer than MIN as workers die (with --max-restarts)")
	f.StringVar(&nnodes, "nnodes", "1", "nodes in the job (a MIN:MAX range is torchrun's; here elasticity is per worker: --nproc-per-node MIN:MAX)")
	f.IntVar(&cfg.MaxProcs, "max-nproc-per-node", launch.DefaultMaxProcs, "the most workers --nproc-per-node may start on this node")
	f.IntVar(&restarts.SlotRestarts, "max-slot-restarts", 0, "elastic jobs: how often one slot's worker may die and be restarted at the same size before its slot is given up")
	f.IntVar(&cfg.NodeRank, "node-rank", 0, "this node's rank, 0 ≤ node-rank < nnodes")
	f.StringVar(&cfg.MasterAddr, "master-addr", "", "host of node 0, where rank 0 serves the rendezvous (default 127.0.0.1 on one node)")
	f.IntVar(&cfg.MasterPort, "master-port", 0, "rendezvous port (default: a free port on one node, 29500 on several)")
	f.StringVar(&tokenFile, "token-file", "", "file holding the job token shared by all nodes (else $"+tcp.EnvToken+"; generated on one node)")
	f.DurationVar(&cfg.InterruptGrace, "interrupt-grace", launch.DefaultInterruptGrace, "after Ctrl-C (forwarded once to every worker), how long they may take to stop before SIGTERM")
	f.DurationVar(&cfg.StopGrace, "stop-grace", launch.DefaultStopGrace, "after a failure, how long the others may take to exit on their own before SIGTERM (and again before SIGKILL)")
	f.IntVar(&restarts.Max, "max-restarts", 0, "when a worker dies, stop the others and restart the whole job up to this many times, resuming from the last complete checkpoint (the worker gets --resume DIR)")
	f.StringVar(&restarts.Root, "checkpoint-dir", "", "the workers' checkpoint root that --max-restarts resumes from (default: checkpoint.dir from a --set in the worker's arguments)")
	return c
}

// procRange reads --nproc-per-node: N (min 0: not elastic) or MIN:MAX.
func procRange(v string) (minProcs, maxProcs int, err error) {
	lo, hi, ranged := strings.Cut(v, ":")
	if maxProcs, err = strconv.Atoi(strings.TrimSpace(hi)); !ranged {
		maxProcs, err = strconv.Atoi(strings.TrimSpace(lo))
	}
	if err == nil && ranged {
		minProcs, err = strconv.Atoi(strings.TrimSpace(lo))
	}
	switch {
	case err != nil:
		return 0, 0, fmt.Errorf("launch: --nproc-per-node=%q: want N or MIN:MAX (integers)", v)
	case ranged && (minProcs < 1 || minProcs > maxProcs):
		return 0, 0, fmt.Errorf("launch: --nproc-per-node=%q: want 1 <= MIN <= MAX", v)
	}
	return minProcs, maxProcs, nil
}

// nodeCount reads --nnodes: N, or N:N. A range of node counts is
// torchrun's elastic membership across hosts, which trellis launch does
// not do; on one host the elastic unit is the worker (--nproc-per-node
// MIN:MAX).
func nodeCount(v string) (int, error) {
	lo, hi, ranged := strings.Cut(v, ":")
	n, err := strconv.Atoi(strings.TrimSpace(lo))
	if err != nil {
		return 0, fmt.Errorf("launch: --nnodes=%q: want an integer", v)
	}
	if ranged && strings.TrimSpace(hi) != strings.TrimSpace(lo) {
		return 0, fmt.Errorf("launch: --nnodes=%q: elastic membership across nodes is not supported; on one node give the range of workers, --nproc-per-node MIN:MAX", v)
	}
	return n, nil
}

// setValue finds key's value among "--set key=value" (or
// "--set=key=value") arguments; the last wins, as in trellis train.
func setValue(args []string, key string) string {
	v := ""
	for i, a := range args {
		kv, ok := strings.CutPrefix(a, "--set=")
		if !ok && a == "--set" && i+1 < len(args) {
			kv, ok = args[i+1], true
		}
		if k, val, found := strings.Cut(kv, "="); ok && found && k == key {
			v = val
		}
	}
	return v
}

// launchToken reads the shared job token: --token-file, else the
// environment, else none (a single node generates one).
func launchToken(file string) (string, error) {
	if file != "" {
		b, err := bounded.ReadFile(file, 4096, "token file")
		if err != nil {
			return "", fmt.Errorf("launch: --token-file: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	return os.Getenv(tcp.EnvToken), nil
}

// workerProgram is the program trellis launch starts: prog as given, but
// "trellis" when no trellis is on PATH is this executable (the README's
// `trellis launch … -- trellis train` run as ./trellis, or go run, would
// otherwise fail to start its workers).
func workerProgram(prog string, look func(string) (string, error), self func() (string, error)) string {
	if prog != "trellis" {
		return prog
	}
	if _, err := look(prog); err == nil {
		return prog
	}
	if exe, err := self(); err == nil {
		return exe
	}
	return prog
}
