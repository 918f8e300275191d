package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"trellis/comm/commbench"
	"trellis/config"
	"trellis/train"
)

// execute runs a subcommand in process and returns its error.
func execute(c *cobra.Command, args ...string) error {
	c.SetOut(new(bytes.Buffer))
	c.SetErr(new(bytes.Buffer))
	c.SetArgs(args)
	return c.Execute()
}

// TestNumericFlagsRejected: every numeric flag of sample and bench gives a
// one-line error naming the flag and the rule, before any work.
func TestNumericFlagsRejected(t *testing.T) {
	for _, c := range []struct {
		cmd  func() *cobra.Command
		args []string
		want string
	}{
		{newBenchMatmulCmd, []string{"--m", "4294967296", "--k", "4294967296", "--n", "4294967296"}, "--m=4294967296 --k=4294967296 --n=4294967296: the operands' size (m·k + k·n + m·n floats) overflows"},
		{newBenchMatmulCmd, []string{"--m", "1000000", "--k", "1000000", "--n", "1000"}, "more than this machine's memory"},
		{newBenchMatmulCmd, []string{"--m", "20000", "--k", "20000", "--n", "20000", "--time", "1ms"}, "longer than --time=1ms"},
		{newBenchMatmulCmd, []string{"--threads", "5000"}, "--threads=5000 must be in [0, 1024]"},
		{newBenchMatmulCmd, []string{"--time", "-1s"}, "--time=-1s must be > 0"},
		{newBenchCommCmd, []string{"--sizes", "2TiB"}, "more than this machine's memory"},
		{newBenchCommCmd, []string{"--sizes", "9999999TiB"}, "larger than the largest size"},
		{newBenchCommCmd, []string{"--ranks", "0"}, "--ranks=0 must be in [1, 1024]"},
		{newBenchCommCmd, []string{"--iters", "-3"}, "--iters=-3 must be in [0, 1000000]"},
		{newSampleCmd, []string{"--checkpoint", "x", "--temperature", "NaN"}, "--temperature=NaN must be a finite number >= 0"},
		{newSampleCmd, []string{"--checkpoint", "x", "--tokens", "-1"}, "--tokens=-1 must be >= 0"},
		{newSampleCmd, []string{"--checkpoint", "x", "--threads", "-1"}, "--threads=-1 must be in [0, 1024]"},
	} {
		err := execute(c.cmd(), c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: error %v, want one line containing %q", c.args, err, c.want)
		}
	}
}

// numericFlags are the CLI's numeric flags FuzzNumericFlags sets, with the
// command they belong to; the train ones map to the --set key they stand for.
var numericFlags = []struct{ cmd, flag string }{
	{"sample", "tokens"}, {"sample", "temperature"}, {"sample", "top-k"}, {"sample", "threads"}, {"sample", "seed"},
	{"matmul", "m"}, {"matmul", "k"}, {"matmul", "n"}, {"matmul", "threads"}, {"matmul", "time"},
	{"comm", "sizes"}, {"comm", "ranks"}, {"comm", "iters"}, {"comm", "warmup"},
	{"train", "parallel.device_memory"}, {"train", "parallel.bucket_size"}, {"train", "parallel.devices"},
	{"train", "parallel.timeout"}, {"train", "parallel.link_bandwidth"}, {"train", "parallel.link_latency"},
	{"train", "train.micro_batch"}, {"train", "train.threads"}, {"train", "model.layers"},
}

// FuzzNumericFlags sets one numeric flag of sample, bench matmul, bench
// comm or train to any string and runs the command's validation (not the
// command): sizes ("2GiB"), durations and counts must parse to an error
// or a validated value, never a panic.
func FuzzNumericFlags(f *testing.F) {
	for i := range numericFlags {
		for _, v := range []string{"0", "-1", "1e30", "0.5", "2TiB", "NaN", "4294967296", "9223372036854775807", "1h", "-5s", "1KiB:1TiB"} {
			f.Add(uint8(i), v)
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, value string) {
		nf := numericFlags[int(which)%len(numericFlags)]
		_ = validateFlag(nf.cmd, nf.flag, value)
	})
}

// validateFlag sets flag of cmd to value and runs what the command checks
// before working.
func validateFlag(cmd, flag, value string) error {
	switch cmd {
	case "sample":
		c := newSampleCmd()
		if err := c.Flags().Set(flag, value); err != nil {
			return err
		}
		fl := c.Flags()
		var o train.SampleOptions
		o.Tokens, _ = fl.GetInt("tokens")
		o.Temperature, _ = fl.GetFloat64("temperature")
		o.TopK, _ = fl.GetInt("top-k")
		o.Threads, _ = fl.GetInt("threads")
		return o.Validate()
	case "matmul":
		c := newBenchMatmulCmd()
		if err := c.Flags().Set(flag, value); err != nil {
			return err
		}
		fl := c.Flags()
		var cfg benchMatmulConfig
		cfg.M, _ = fl.GetInt("m")
		cfg.K, _ = fl.GetInt("k")
		cfg.N, _ = fl.GetInt("n")
		cfg.Threads, _ = fl.GetInt("threads")
		cfg.Duration, _ = fl.GetDuration("time")
		cfg.Layout, _ = fl.GetString("layout")
		return cfg.Validate()
	case "comm":
		c := newBenchCommCmd()
		if err := c.Flags().Set(flag, value); err != nil {
			return err
		}
		fl := c.Flags()
		ranks, _ := fl.GetInt("ranks")
		iters, _ := fl.GetInt("iters")
		warmup, _ := fl.GetInt("warmup")
		s, _ := fl.GetString("sizes")
		sizes, err := commbench.ParseSizes(s)
		if err != nil {
			return err
		}
		return checkBenchComm(ranks, iters, warmup, sizes)
	}
	j := train.DefaultJob()
	if err := config.Decode(&j, "", nil, []string{flag + "=" + value}); err != nil {
		return err
	}
	return j.Check()
}
