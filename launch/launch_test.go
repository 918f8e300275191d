package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// The test binary doubles as the worker program: with TRELLIS_LAUNCH_TEST
// set, TestMain runs that worker mode instead of the tests.
const modeVar = "TRELLIS_LAUNCH_TEST"

func TestMain(m *testing.M) {
	if mode := os.Getenv(modeVar); mode != "" {
		os.Exit(testWorker(mode))
	}
	os.Exit(m.Run())
}

func testWorker(mode string) int {
	e, err := WorkerEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	switch mode {
	case "echo":
		fmt.Printf("hello from %d of %d, local %d of %d, master %s\n", e.Rank, e.WorldSize, e.LocalRank, e.LocalWorldSize, e.MasterHostPort())
		fmt.Fprintln(os.Stderr, "a line on stderr")
		return 0
	case "fail-rank-1":
		if e.Rank != 1 {
			time.Sleep(time.Minute)
			return 0
		}
		for i := 0; i < 30; i++ {
			fmt.Printf("line %d\n", i)
		}
		return 3
	case "sleep":
		fmt.Println("sleeping")
		time.Sleep(time.Minute)
		return 0
	case "allreduce":
		return allReduceWorker(e)
	case "fail-once":
		return failOnceWorker(e)
	case "shrink":
		return shrinkWorker(e)
	case "shm-leave":
		return shmLeaveWorker(e)
	case "blame":
		if e.Rank == 1 {
			fmt.Println("trellis: train: comm: allreduce: rank 5 failed: connection closed without goodbye (process died?)")
			return 1
		}
		time.Sleep(time.Minute)
		return 0
	case "blame-chain": // rank 1 loses rank 5 (another node) and closes; rank 0 fails first, naming rank 1
		if e.Rank == 1 {
			fmt.Println("trellis: train: comm: barrier: rank 5 failed: connection closed without goodbye (process died?)")
			time.Sleep(time.Minute)
			return 1
		}
		time.Sleep(300 * time.Millisecond)
		fmt.Println("trellis: step 8: tp: all-reduce: comm: close: rank 1 failed: comm: group closed: closed its group")
		return 1
	case "blame-closed": // rank 0 sees rank 4 close in good order and fails first; rank 1 names rank 5, which died
		if e.Rank == 0 {
			fmt.Println("trellis: step 7: zero: comm: allreduce: rank 4 failed: closed its connection (the rank called Close)")
			return 1
		}
		fmt.Println("trellis: step 7: zero: comm: allreduce: rank 5 failed: connection reset (process died?)")
		time.Sleep(time.Minute) // stopped by the launcher: its last lines still count
		return 1
	case "blame-closed-only": // the only blame is a peer that closed in good order: it stays
		if e.Rank == 0 {
			fmt.Println("trellis: step 7: zero: comm: allreduce: rank 4 failed: closed its connection (the rank called Close)")
			return 1
		}
		time.Sleep(time.Minute)
		return 0
	case "config":
		if e.Rank == 0 {
			fmt.Println("cannot run on this world")
			return ExitConfig
		}
		time.Sleep(time.Minute)
		return 0
	}
	return 2
}

// syncBuf is an io.Writer safe for the launcher's goroutines.
type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor polls until s holds n copies of sub.
func (s *syncBuf) waitFor(sub string, n int, limit time.Duration) error {
	for end := time.Now().Add(limit); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if strings.Count(s.String(), sub) >= n {
			return nil
		}
	}
	return fmt.Errorf("%d × %q not seen within %v; output:\n%s", n, sub, limit, s.String())
}

func testConfig(t *testing.T, mode string, n int) (Config, *syncBuf, *syncBuf) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out, errb := &syncBuf{}, &syncBuf{}
	return Config{NProcPerNode: n, Program: exe, Env: []string{modeVar + "=" + mode},
		Stdout: out, Stderr: errb, StopGrace: 300 * time.Millisecond}, out, errb
}

func TestRunPrefixesAndEnv(t *testing.T) {
	cfg, out, errb := testConfig(t, "echo", 3)
	if err := Run(context.Background(), cfg); err != nil {
		t.Fatalf("%v\nstderr:\n%s", err, errb)
	}
	for r := 0; r < 3; r++ {
		want := fmt.Sprintf("[rank %d] hello from %d of 3, local %d of 3, master 127.0.0.1:", r, r, r)
		if !strings.Contains(out.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
		if !strings.Contains(errb.String(), fmt.Sprintf("[rank %d] a line on stderr\n", r)) {
			t.Errorf("stderr lacks rank %d's line:\n%s", r, errb)
		}
	}
}

func TestRunReportsFailure(t *testing.T) {
	cfg, _, _ := testConfig(t, "fail-rank-1", 3)
	start := time.Now()
	err := Run(context.Background(), cfg)
	var we *WorkerError
	if !errors.As(err, &we) {
		t.Fatalf("got %v, want a *WorkerError", err)
	}
	if we.Rank != 1 || we.Status != "exit status 3" || len(we.Tail) != DefaultTailLines || we.Tail[len(we.Tail)-1] != "line 29" {
		t.Fatalf("got rank %d, status %q, tail %q", we.Rank, we.Status, we.Tail)
	}
	if fmt.Sprint(we.Stopped) != "[0 2]" || !strings.Contains(err.Error(), "line 29") {
		t.Fatalf("stopped %v; message:\n%v", we.Stopped, err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("took %v to stop the other workers", took)
	}
}

func TestRunInterrupted(t *testing.T) {
	cfg, out, _ := testConfig(t, "sleep", 2)
	ctx, cancel := context.WithCancel(context.Background())
	j, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := out.waitFor("sleeping", 2, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := j.Wait(); !errors.Is(err, ErrInterrupted) {
		t.Fatalf("got %v, want ErrInterrupted", err)
	}
	for _, e := range j.Exits() {
		if !e.Stopped || !e.Failed() {
			t.Errorf("rank %d: %+v, want stopped by a signal", e.Rank, e)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{NProcPerNode: 2, Program: "x"}
	for _, c := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.NProcPerNode = 0 }, "--nproc-per-node"},
		{func(c *Config) { c.NNodes, c.NodeRank = 2, 2 }, "--node-rank"},
		{func(c *Config) { c.NNodes, c.Token = 2, "t" }, "--master-addr"},
		{func(c *Config) { c.NNodes, c.MasterAddr = 2, "h" }, "job token"},
		{func(c *Config) { c.Program = "" }, "program"},
		{func(c *Config) { c.MasterPort = 70000 }, "--master-port"},
		{func(c *Config) { c.StopGrace = -1 }, "--stop-grace"},
	} {
		cfg := ok
		c.edit(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an error naming %s", err, c.want)
		}
	}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
}
