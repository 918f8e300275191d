package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"trellis/comm/shm"
)

// shmLeaveWorker leaves a segment file under its shared-memory name, as a
// worker killed before its peers attached does, and kills itself.
func shmLeaveWorker(e Env) int {
	name, dir := os.Getenv(shm.EnvName), os.Getenv(shm.EnvDir)
	path := filepath.Join(dir, fmt.Sprintf("%s-seg%d", name, e.Rank))
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println("left", filepath.Base(path))
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	return 0
}

// The workers of one node share one shared-memory name, fresh per job;
// what they leave behind is gone once the job is, however they died, and
// nothing else in the directory is touched.
func TestSegmentsRemoved(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "trellis-other-job-world")
	os.WriteFile(other, nil, 0o600)
	names := map[string]bool{}
	for range 2 {
		cfg, out, _ := testConfig(t, "shm-leave", 2)
		cfg.Env = append(cfg.Env, shm.EnvDir+"="+dir)
		j, err := Start(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		var we *WorkerError
		if err := j.Wait(); !errors.As(err, &we) || we.Status != "signal: killed" {
			t.Fatalf("got %v, want a worker killed by a signal", err)
		}
		if n := j.SegmentsRemoved(); n != 2 {
			t.Errorf("removed %d segments, want 2; output:\n%s", n, out)
		}
		for _, l := range strings.Split(out.String(), "\n") {
			if _, name, ok := strings.Cut(l, "left "); ok {
				names[name[:strings.LastIndex(name, "-seg")]] = true
			}
		}
		left, _ := filepath.Glob(filepath.Join(dir, "*"))
		if len(left) != 1 || left[0] != other {
			t.Errorf("left in the directory: %v, want only %s", left, other)
		}
	}
	if len(names) != 2 {
		t.Errorf("shared-memory names of two jobs: %v, want one per job, fresh each time", names)
	}
}

// A worker that fails naming a peer (a rank of another node, which this
// launcher cannot see) is reported with that rank and its node.
func TestBlamedPeer(t *testing.T) {
	cfg, _, _ := testConfig(t, "blame", 2)
	start := time.Now()
	err := Run(context.Background(), cfg)
	var we *WorkerError
	if !errors.As(err, &we) || we.Rank != 1 || we.Blames != 5 {
		t.Fatalf("got %v, want rank 1 failing, blaming rank 5", err)
	}
	if !strings.Contains(err.Error(), "rank 1 failed (exit status 1): it named rank 5 (node 2) as the peer that failed") {
		t.Errorf("message: %v", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Error("too slow")
	}
}

// The first worker to fail names its node-mate, which had lost a rank of
// another node first: the launcher names that rank, the root of the chain
// (a launcher of a multi-node job otherwise reports the node-mate).
func TestBlamedPeerChain(t *testing.T) {
	cfg, _, _ := testConfig(t, "blame-chain", 2)
	err := Run(context.Background(), cfg)
	var we *WorkerError
	if !errors.As(err, &we) || we.Rank != 0 || we.Blames != 5 {
		t.Fatalf("got %v, want rank 0 failing, blaming rank 5 through rank 1", err)
	}
	if !strings.Contains(err.Error(), "rank 0 failed (exit status 1): it named rank 5 (node 2) as the peer that failed") {
		t.Errorf("message: %v", err)
	}
}

// The first worker to fail names a peer of another node that closed its
// connection in good order (it gave up on its own); a node-mate that
// failed after it names a rank that died: the launcher names the dead
// rank, whichever of the two failed first (TestNetnsKillRestart's race:
// node 1's launcher named rank 0, whose launcher stopped it after its
// node-mate rank 1 was killed, in 1 of 40 runs). With no other blame the
// closed peer is named.
func TestBlamedPeerPastAClosedOne(t *testing.T) {
	cfg, _, _ := testConfig(t, "blame-closed", 2)
	err := Run(context.Background(), cfg)
	var we *WorkerError
	if !errors.As(err, &we) || we.Rank != 0 || we.Blames != 5 {
		t.Fatalf("got %v, want rank 0 failing, blaming rank 5 (named by rank 1), not rank 4 (closed in good order)", err)
	}
	cfg, _, _ = testConfig(t, "blame-closed-only", 2)
	err = Run(context.Background(), cfg)
	if !errors.As(err, &we) || we.Rank != 0 || we.Blames != 4 {
		t.Fatalf("got %v, want rank 0 failing, blaming rank 4", err)
	}
}
