package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"trellis/internal/outfile"
	"trellis/plan"
	"trellis/profile"
)

// newProfileCmd: trellis profile [-o host.toml] [--quick]. It measures this
// machine in the planner's terms and writes a cluster file; the shm and
// tcp collectives re-execute this binary as `bench comm --worker`.
func newProfileCmd() *cobra.Command {
	var (
		out, backends string
		cache         bool
		c             profile.Config
	)
	cmd := &cobra.Command{
		Use:   "profile",
		Short: "Measure this machine (GEMM, attention, memory, collectives) and write a cluster file for the planner",
		Example: "  trellis profile -o host.toml\n" +
			"  trellis profile --quick --backends local\n" +
			"  trellis plan --model gpt2 --cluster host.toml --devices 2 --seq 1024 --global-batch 8",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out != "" && out != "-" {
				// Before minutes of measuring: a FIFO, a device or a
				// directory is refused.
				if err := outfile.Check("-o", out); err != nil {
					return err
				}
			}
			c.Backends = strings.Split(backends, ",")
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			c.Procs = func(cc profile.CommConfig) profile.CommConfig {
				sizes := make([]string, len(cc.Sizes))
				for i, s := range cc.Sizes {
					sizes[i] = strconv.FormatInt(s, 10)
				}
				cc.Program = exe
				cc.Args = []string{"bench", "comm", "--worker", "--backend", cc.Backend, "--ranks", strconv.Itoa(cc.Ranks),
					"--ops", strings.Join(cc.Ops, ","), "--sizes", strings.Join(sizes, ","),
					"--iters", strconv.Itoa(cc.Iters), "--warmup", strconv.Itoa(cc.Warmup)}
				return cc
			}
			stderr := cmd.ErrOrStderr()
			tty := term.IsTerminal(int(os.Stderr.Fd()))
			c.Progress = func(stage string, done, total int) {
				switch {
				case tty:
					fmt.Fprintf(stderr, "\r\033[Kprofile: %s %d/%d", stage, done+1, total)
				case done == 0:
					fmt.Fprintf(stderr, "profile: %s\n", stage)
				}
			}
			res, err := profile.Run(cmd.Context(), c)
			if tty {
				fmt.Fprintln(stderr)
			}
			if err != nil {
				return err
			}
			var buf bytes.Buffer
			if err := res.WriteTOML(&buf); err != nil {
				return err
			}
			if _, err := plan.ParseClusterFile(buf.Bytes()); err != nil {
				return fmt.Errorf("profile: the measured cluster file does not validate: %w\n%s", err, buf.String())
			}
			if cache {
				p, err := cachedProfilePath()
				if err == nil {
					err = os.MkdirAll(filepath.Dir(p), 0o755)
				}
				if err == nil {
					err = outfile.WriteBytes("--cache", p, buf.Bytes())
				}
				if err != nil {
					return fmt.Errorf("profile: --cache: %w", err)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "profile: cached as %s (trellis train uses it when parallel.cluster is not set)\n", p)
				if out == "" {
					return nil
				}
			}
			if out == "" || out == "-" {
				_, err = cmd.OutOrStdout().Write(buf.Bytes())
				return err
			}
			if err := outfile.WriteBytes("-o", out, buf.Bytes()); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s (%s): peak %.1f GFLOP/s per device, GEMM η=%.2f κ=%.0f, memory %.1f GB/s\n",
				out, res.Took.Round(1e8), res.PeakFLOPs/1e9, res.GEMMEff, res.GEMMKnee, res.Memory.CopyGBps)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&out, "out", "o", "", "write the cluster file here (default: standard output)")
	f.BoolVar(&cache, "cache", false, "also keep the cluster file in the user cache directory, where trellis train finds it")
	f.BoolVar(&c.Quick, "quick", false, "fewer shapes and shorter timings (under 30 s)")
	f.IntVar(&c.Threads, "threads", 1, "kernel threads of one device (rank)")
	f.IntVar(&c.Ranks, "ranks", 0, "ranks of the collective timings (0: the CPU count, at least 2)")
	f.StringVar(&backends, "backends", "local,shm,tcp", "comm backends to time: local (goroutine ranks) and shm (processes over shared memory): the first listed is [intra], the other a comment; tcp: [inter]")
	return cmd
}
