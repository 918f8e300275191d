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
