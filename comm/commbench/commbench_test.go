package commbench

import (
	"context"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
)

// The test binary is also the tcp worker: launched with EnvOut set, it runs
// workerConfig through RunWorker.
var workerConfig = Config{Ops: []string{"allreduce", "sendrecv"}, Sizes: []int64{4 << 10}, Iters: 3}

func TestMain(m *testing.M) {
	if os.Getenv(EnvOut) != "" {
		if err := RunWorker(workerConfig); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestParseSizes(t *testing.T) {
	for in, want := range map[string][]int64{
		"1KiB:8KiB":      {1024, 2048, 4096, 8192},
		"64MiB":          {64 << 20},
		"4096, 1MB,2GiB": {4096, 1e6, 2 << 30},
		"1KiB:1KiB":      {1024},
		"3KiB:13KiB":     {3 << 10, 6 << 10, 12 << 10},
		"2TiB":           {2 << 40}, // TiB parses like GiB; memory is the CLI's check
		"2GiB:4611686018427387904": func() []int64 {
			var out []int64
			for v := int64(2 << 30); v > 0 && v <= 1<<62; v *= 2 {
				out = append(out, v)
			}
			return out
		}(), // the last doubling would overflow
	} {
		if got, err := ParseSizes(in); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%q: got %v, %v, want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "8KiB:1KiB", "0:1KiB", "-1", "1KiB:", "9999999TiB", "4611686018427387905"} {
		if _, err := ParseSizes(in); err == nil {
			t.Errorf("%q: accepted", in)
		}
	}
	for n, want := range map[int64]string{1024: "1KiB", 64 << 20: "64MiB", 1000: "1000B", 3 << 30: "3GiB"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestValidate(t *testing.T) {
	ok := Config{Backend: "local", Ranks: 2, Ops: []string{"allreduce"}, Sizes: []int64{1024}}
	for _, c := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Backend = "nccl" }, "Backend"},
		{func(c *Config) { c.Ranks = 0 }, "--ranks=0"},
		{func(c *Config) { c.Ops = []string{"gather"} }, "--ops: unknown op \"gather\""},
		{func(c *Config) { c.Sizes = nil }, "--sizes"},
		{func(c *Config) { c.Sizes = []int64{2} }, "--sizes: 2 bytes"},
		{func(c *Config) { c.Iters = -1 }, "--iters=-1"},
		// Issue 29: 7 bytes over 3 ranks timed 0 elements.
		{func(c *Config) { c.Sizes, c.Ops, c.Ranks = []int64{7}, []string{"reducescatter"}, 3 }, "--sizes 7 with --ops reducescatter on --ranks=3: each rank's part would hold 0 fp32 elements"},
		{func(c *Config) { c.Sizes, c.Ops, c.Ranks = []int64{8}, []string{"allgather"}, 4 }, "allgather needs at least 4 × ranks = 16 bytes"},
	} {
		cfg := ok
		c.edit(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an error naming %s", err, c.want)
		} else if strings.Contains(err.Error(), "Ops") || strings.Contains(err.Error(), "Sizes") || strings.Contains(err.Error(), "Ranks") {
			t.Errorf("%v names a Go field, not the flag", err)
		}
	}
}

// checkRows holds rows to the nccl-tests definitions.
func checkRows(t *testing.T, rows []Row, backend string, ranks int, ops []string, sizes []int64) {
	t.Helper()
	if len(rows) != len(ops)*len(sizes) {
		t.Fatalf("%d rows, want %d", len(rows), len(ops)*len(sizes))
	}
	for i, r := range rows {
		op := ops[i/len(sizes)]
		if r.Backend != backend || r.Op != op || r.Ranks != ranks || r.TimeS <= 0 || r.Bytes <= 0 {
			t.Errorf("row %d: %+v", i, r)
			continue
		}
		if alg := float64(r.Bytes) / r.TimeS / 1e9; math.Abs(alg-r.AlgBWGBps) > 1e-9*alg {
			t.Errorf("row %d: algbw %g, want bytes/time = %g", i, r.AlgBWGBps, alg)
		}
		if want := r.AlgBWGBps * busFactor(op, ranks); math.Abs(want-r.BusBWGBps) > 1e-9*want {
			t.Errorf("row %d: busbw %g, want %g", i, r.BusBWGBps, want)
		}
	}
}

func TestBusFactor(t *testing.T) {
	for _, c := range []struct {
		op   string
		p    int
		want float64
	}{{"allreduce", 4, 1.5}, {"allreduce", 2, 1}, {"reducescatter", 4, 0.75}, {"allgather", 8, 0.875},
		{"broadcast", 4, 1}, {"sendrecv", 3, 1}, {"allreduce", 1, 0}, {"alltoall", 4, 0.75}} {
		if got := busFactor(c.op, c.p); got != c.want {
			t.Errorf("%s p=%d: %g, want %g", c.op, c.p, got, c.want)
		}
	}
}

func TestLocal(t *testing.T) {
	cfg := Config{Backend: "local", Ranks: 3, Ops: Ops(), Sizes: []int64{1 << 10, 12 << 10}, Iters: 2, Warmup: -1}
	rows, err := runLocal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkRows(t, rows, "local", 3, Ops(), cfg.Sizes)
	// Reduce-scatter and all-gather report the p-chunk buffer, rounded to
	// whole chunks: 1 KiB = 256 floats → 85 per rank → 255 floats.
	if rows[2].Op != "reducescatter" || rows[2].Bytes != 255*4 {
		t.Errorf("reducescatter row %+v, want 1020 bytes", rows[2])
	}
}

// TestProcesses measures with worker processes on every process backend;
// auto on one host is shm.
func TestProcesses(t *testing.T) {
	for backend, opened := range map[string]string{"tcp": "tcp", "shm": "shm", "auto": "shm"} {
		t.Run(backend, func(t *testing.T) { testProcesses(t, backend, opened) })
	}
}

func testProcesses(t *testing.T, backend, opened string) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := workerConfig
	cfg.Backend, cfg.Ranks, cfg.Program = backend, 2, exe
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkRows(t, rep.Rows, opened, 2, cfg.Ops, cfg.Sizes)
	if rep.Reference.TCPStreamGBps <= 0 || rep.Reference.MemcpyGBps <= 0 {
		t.Fatalf("references %+v", rep.Reference)
	}
	var b strings.Builder
	rep.WriteTable(&b)
	if !strings.Contains(b.String(), "sendrecv") || !strings.Contains(b.String(), "reference:") {
		t.Fatalf("table:\n%s", b.String())
	}
}
