package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"trellis/comm"
)

// allReduceWorker joins a TCP world from the launcher's environment and
// all-reduces until an operation fails, which it reports and exits 1.
func allReduceWorker(e Env) int {
	cfg, err := e.TCPConfig(os.LookupEnv)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	g, err := tcpNew(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "join:", err)
		return 2
	}
	buf := make([]float32, 1<<14)
	for i := 0; ; i++ {
		if err := comm.AllReduce(g, comm.F32(buf), comm.Sum); err != nil {
			fmt.Fprintf(os.Stderr, "allreduce %d failed: %v\n", i, err)
			return 1
		}
		if i == 0 {
			fmt.Println("ready")
		}
	}
}

// TestKilledWorker is the failure target: four TCP workers loop on
// all-reduce; kill -9 of one makes the other three exit on their own with an
// error naming it within 10 s (comm/tcp's default timeout), and the launcher
// report that rank's death.
func TestKilledWorker(t *testing.T) {
	const n, victim = 4, 2
	cfg, out, errb := testConfig(t, "allreduce", n)
	cfg.StopGrace = 20 * time.Second // the survivors must exit by themselves
	j, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := out.waitFor("ready", n, 20*time.Second); err != nil {
		syscall.Kill(j.Pids()[0], syscall.SIGKILL)
		t.Fatalf("%v\nstderr:\n%s", err, errb)
	}
	killed := time.Now()
	if err := syscall.Kill(j.Pids()[victim], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = j.Wait()
	var we *WorkerError
	if !errors.As(err, &we) || we.Rank != victim || we.Status != "signal: killed" {
		t.Fatalf("launcher: got %v, want rank %d killed", err, victim)
	}
	var slowest time.Duration
	for _, e := range j.Exits() {
		if e.Rank == victim {
			continue
		}
		slowest = max(slowest, e.At.Sub(killed))
		if e.Stopped || e.Code != 1 {
			t.Errorf("rank %d: %+v, want exit status 1 on its own", e.Rank, e)
		}
		if took := e.At.Sub(killed); took > 10*time.Second {
			t.Errorf("rank %d exited %v after the kill, want within 10s", e.Rank, took)
		}
		want := fmt.Sprintf("[rank %d] allreduce", e.Rank)
		line := lineWith(errb.String(), want)
		if !strings.Contains(line, fmt.Sprintf("rank %d failed", victim)) {
			t.Errorf("rank %d's error does not name rank %d: %q\nstderr:\n%s", e.Rank, victim, line, errb)
		}
	}
	t.Logf("the %d survivors exited within %v of the kill", n-1, slowest)
}

func lineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}
