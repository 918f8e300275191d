package launch

import (
	"context"
	"io"
	"runtime"
	"strings"
	"testing"
)

// Issue 29: --nproc-per-node -1 (or a huge value) panicked in makeslice
// before validation; --nnodes 2^62 handed workers WORLD_SIZE=0; the errors
// named Go fields (NProcPerNode=0). Every bad value is now a one-line
// error naming the flag, before anything is allocated or started.
func TestValidateBeforeAllocating(t *testing.T) {
	base := Config{NProcPerNode: 2, Program: "true"}
	for _, c := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.NProcPerNode = -1 }, "--nproc-per-node=-1: must be at least 1"},
		{func(c *Config) { c.NProcPerNode = 0 }, "--nproc-per-node=0: must be at least 1"},
		{func(c *Config) { c.NProcPerNode = 1 << 62 }, "--nproc-per-node=4611686018427387904: more than 1024 workers on one node (raise --max-nproc-per-node"},
		{func(c *Config) { c.NProcPerNode = 99999 }, "more than 1024 workers"},
		{func(c *Config) { c.NProcPerNode, c.MaxProcs = 2000, 1000 }, "more than 1000 workers"},
		{func(c *Config) { c.MaxProcs = -1 }, "--max-nproc-per-node=-1"},
		{func(c *Config) { c.NNodes, c.MasterAddr, c.Token = 1<<62, "h", "t" }, "--nnodes=4611686018427387904 × --nproc-per-node=2: more than 1048576 workers"},
		{func(c *Config) { c.NNodes = -1 }, "--nnodes=-1"},
		{func(c *Config) { c.NodeRank = 1 }, "--node-rank=1: must be in [0, --nnodes=1)"},
		{func(c *Config) { c.MasterPort = 70000 }, "--master-port=70000"},
		{func(c *Config) { c.NNodes = 2 }, "--master-addr is empty"},
		{func(c *Config) { c.NNodes, c.MasterAddr = 2, "h" }, "--token-file"},
		{func(c *Config) { c.Program = "" }, "no program"},
		{func(c *Config) { c.StopGrace = -1 }, "--stop-grace=-1ns"},
		{func(c *Config) { c.InterruptGrace = -1 }, "--interrupt-grace=-1ns"},
	} {
		cfg := base
		c.edit(&cfg)
		var err error
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s: panic %v", c.want, p)
				}
			}()
			err = RunRestarting(context.Background(), cfg, Restarts{})
		}()
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("error %v, want one line containing %q", err, c.want)
		}
		for _, field := range []string{"NProcPerNode", "NNodes", "NodeRank", "MasterPort", "MasterAddr"} {
			if err != nil && strings.Contains(err.Error(), field) {
				t.Errorf("%v names the Go field %s", err, field)
			}
		}
	}
}

// longLine is a line of n-1 bytes of 'x' and a newline.
type longLine struct{ n int64 }

func (l *longLine) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, io.EOF
	}
	k := min(int64(len(p)), l.n)
	for i := range p[:k] {
		p[i] = 'x'
	}
	if l.n -= k; l.n == 0 {
		p[k-1] = '\n'
	}
	return int(k), nil
}

// Issue 29: a 200 MB worker line took 610 MB in the launcher and was
// repeated whole in the failure report. Lines are cut at MaxLine (saying
// how much was dropped), the failure report's lines shorter still, and
// copying the line allocates about that much, not 200 MB.
func TestLongLineCut(t *testing.T) {
	var out strings.Builder
	lw := &lineWriter{w: &out}
	tl := &tail{n: DefaultTailLines}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	copyLines(io.MultiReader(&longLine{n: 200 << 20}, strings.NewReader("next\n")), "[rank 0] ", lw, tl, nil, DefaultMaxLine)
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
		t.Errorf("copying a 200 MiB line allocated %d MiB", alloc>>20)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 2 || lines[1] != "[rank 0] next" {
		t.Fatalf("%d lines, last %q", len(lines), lines[len(lines)-1])
	}
	want := "[... 209649663 more bytes cut: a line of output is limited to 65536 bytes]"
	if !strings.HasSuffix(lines[0], want) || len(lines[0]) > DefaultMaxLine+200 {
		t.Errorf("the long line is %d bytes, ending %q", len(lines[0]), lines[0][max(0, len(lines[0])-100):])
	}
	got := tl.get()
	if len(got) != 2 || len(got[0]) > tailLineBytes+64 {
		t.Errorf("the failure report keeps %d lines, the first %d bytes", len(got), len(got[0]))
	}
	err := (&WorkerError{Rank: 0, Status: "exit status 1", Tail: got}).Error()
	if len(err) > 4<<10 {
		t.Errorf("the failure report is %d bytes", len(err))
	}
}
