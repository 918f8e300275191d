package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// failOnceWorker: rank 1 reports step 7 and fails while $MARK does not
// exist (creating it); otherwise every rank prints its arguments.
func failOnceWorker(e Env) int {
	mark := os.Getenv("MARK")
	if _, err := os.Stat(mark); err != nil {
		if e.Rank != 1 {
			time.Sleep(time.Minute)
			return 0
		}
		fmt.Println("time=x level=INFO msg=step step=7 loss=1")
		os.WriteFile(mark, nil, 0o644)
		return 3
	}
	fmt.Printf("args %q\n", os.Args[1:])
	return 0
}

// A failed job is restarted with --resume and the checkpoint root when a
// checkpoint exists, and the launcher says which rank died, the checkpoint
// and the steps redone; without restarts left the failure is returned.
func TestRunRestarting(t *testing.T) {
	for _, tc := range []struct {
		name    string
		latest  string // "" : no checkpoint yet
		max     int
		wantErr bool
		want    []string
	}{
		{"from a checkpoint", "step-00000004", 1, false, []string{
			"rank 1 died (exit status 3); restart 1 of 1: resuming from checkpoint ROOT/step-00000004 (step 4); steps 5-7 redone (3 steps)",
			`[rank 0] args ["--x" "--resume" "ROOT"]`}},
		{"from scratch", "", 2, false, []string{
			"restart 1 of 2: no complete checkpoint under ROOT: starting again from step 0; steps 1-7 redone",
			`[rank 0] args ["--x"]`}},
		{"no restarts", "", 0, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.latest != "" {
				os.WriteFile(filepath.Join(root, "latest"), []byte(tc.latest+"\n"), 0o644)
			}
			cfg, out, errb := testConfig(t, "fail-once", 2)
			cfg.Args = []string{"--x"}
			cfg.Env = append(cfg.Env, "MARK="+filepath.Join(t.TempDir(), "mark"))
			err := RunRestarting(context.Background(), cfg, Restarts{Max: tc.max, Root: root})
			var we *WorkerError
			if tc.wantErr != errors.As(err, &we) || !tc.wantErr && err != nil {
				t.Fatalf("got %v, want a worker error: %v", err, tc.wantErr)
			}
			all := out.String() + errb.String()
			for _, w := range tc.want {
				if w = strings.ReplaceAll(w, "ROOT", root); !strings.Contains(all, w) {
					t.Errorf("output lacks %q:\n%s", w, all)
				}
			}
		})
	}
	if err := RunRestarting(context.Background(), Config{NProcPerNode: 1, Program: "x"}, Restarts{Max: 1}); err == nil || !strings.Contains(err.Error(), "checkpoint") {
		t.Errorf("restarts without a checkpoint root: %v", err)
	}
}

// shrinkWorker: in a world of 3, rank 1 records a failure in $MARK and
// exits 3 (the others wait to be stopped); in a smaller world every rank
// prints the world it sees.
func shrinkWorker(e Env) int {
	if e.WorldSize == 3 {
		if e.Rank != 1 {
			time.Sleep(time.Minute)
			return 0
		}
		f, _ := os.OpenFile(os.Getenv("MARK"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		f.WriteString("x\n")
		f.Close()
		return 3
	}
	fmt.Printf("world %d elastic %v\n", e.WorldSize, e.Elastic)
	return 0
}

// Elastic: a slot that fails more than SlotRestarts times is given up and
// the job restarts with one worker fewer (with TRELLIS_ELASTIC=1), never
// under MinProcs; the log says what was lost and the new world.
func TestRunRestartingElastic(t *testing.T) {
	for _, tc := range []struct {
		name              string
		min, slot, max    int
		wantErr, wantRuns int // wantErr: 1 when the job must fail
		want              []string
	}{
		{"shrink at the first failure", 2, 0, 2, 0, 1, []string{
			"rank 1 died (exit status 3); restart 1 of 2: slot 1 lost after 1 failure(s); the world shrinks from 3 to 2 workers (minimum 2), ranks renumbered; no complete checkpoint",
			"[rank 1] world 2 elastic true"}},
		{"one restart of the slot first", 2, 1, 2, 0, 2, []string{
			"restart 1 of 2: same world of 3 workers; no complete checkpoint",
			"restart 2 of 2: slot 1 lost after 2 failure(s); the world shrinks from 3 to 2 workers",
			"[rank 0] world 2 elastic true"}},
		{"at the minimum", 3, 0, 1, 1, 2, []string{"restart 1 of 1: same world of 3 workers"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, out, errb := testConfig(t, "shrink", 3)
			mark := filepath.Join(t.TempDir(), "mark")
			cfg.Env = append(cfg.Env, "MARK="+mark)
			err := RunRestarting(context.Background(), cfg, Restarts{Max: tc.max, Root: t.TempDir(), MinProcs: tc.min, SlotRestarts: tc.slot})
			if (err != nil) != (tc.wantErr == 1) {
				t.Fatalf("got %v, want an error: %v", err, tc.wantErr == 1)
			}
			all := out.String() + errb.String()
			for _, w := range tc.want {
				if !strings.Contains(all, w) {
					t.Errorf("output lacks %q:\n%s", w, all)
				}
			}
			if b, _ := os.ReadFile(mark); strings.Count(string(b), "\n") != tc.wantRuns {
				t.Errorf("the slot failed %d times, want %d", strings.Count(string(b), "\n"), tc.wantRuns)
			}
		})
	}
}

// A worker exiting with ExitConfig ends the job at once: a restart would
// fail the same way. Bad elastic settings are refused naming the flag.
func TestRunRestartingConfigErrorAndChecks(t *testing.T) {
	cfg, out, errb := testConfig(t, "config", 2)
	err := RunRestarting(context.Background(), cfg, Restarts{Max: 3, Root: t.TempDir(), MinProcs: 1})
	if err == nil || !strings.Contains(err.Error(), "cannot run as configured on 2 workers: not restarted") {
		t.Errorf("got %v", err)
	}
	if all := out.String() + errb.String(); strings.Contains(all, "restart 1") {
		t.Errorf("restarted after a configuration error:\n%s", all)
	}
	for _, c := range []struct {
		cfg  Config
		r    Restarts
		want string
	}{
		{Config{NProcPerNode: 2}, Restarts{Max: 1, Root: "r", MinProcs: 3}, "minimum must not exceed the maximum"},
		{Config{NProcPerNode: 2}, Restarts{Root: "r", MinProcs: 1}, "needs --max-restarts > 0"},
		{Config{NProcPerNode: 2, NNodes: 2}, Restarts{Max: 1, Root: "r", MinProcs: 1}, "elastic jobs run on one node"},
		{Config{NProcPerNode: 2}, Restarts{Max: 1, Root: "r", MinProcs: 1, SlotRestarts: -1}, "--max-slot-restarts=-1"},
	} {
		if err := RunRestarting(context.Background(), c.cfg, c.r); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want %q", c.r, err, c.want)
		}
	}
}
