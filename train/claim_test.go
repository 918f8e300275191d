package train

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"trellis/checkpoint"
)

// Issue 29: two fresh runs started 0.2 s apart on one checkpoint.dir both
// exited 0 and both printed the same checkpoint, though only one run's
// weights were there. Now the directory has one writer: over 20 tries with
// random start offsets, exactly one run proceeds and the other is refused,
// by the lock (naming the holder's pid and run) or, when it starts after
// the first has finished, by the first run's checkpoints.
func TestOneWriterPerDirectory(t *testing.T) {
	j := tinyJob("")
	j.Train.Steps = 3
	start := time.Now()
	runJob(t, j, filepath.Join(t.TempDir(), "calibrate"), "", 0)
	took := time.Since(start)
	rng := rand.New(rand.NewPCG(29, 1))
	locked := 0
	for try := range 20 {
		dir := filepath.Join(t.TempDir(), "shared")
		j.Checkpoint = checkpoint.Config{Dir: dir, Every: 1}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for k := range 2 {
			delay := time.Duration(rng.Int64N(int64(took)))
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(delay)
				_, errs[k] = Run(context.Background(), Options{Job: j})
			}()
		}
		wg.Wait()
		ok := 0
		for k, err := range errs {
			switch {
			case err == nil:
				ok++
			case errors.Is(err, checkpoint.ErrLocked):
				locked++
				if !strings.Contains(err.Error(), fmt.Sprintf("is being written by pid %d", os.Getpid())) || !strings.Contains(err.Error(), "(run ") {
					t.Errorf("try %d, run %d: %v: want the holder's pid and run named", try, k, err)
				}
			case strings.Contains(err.Error(), "holds the checkpoints of run"):
			default:
				t.Errorf("try %d, run %d: %v", try, k, err)
			}
		}
		if ok != 1 {
			t.Fatalf("try %d: %d runs proceeded (%v), want exactly one", try, ok, errs)
		}
		if _, err := checkpoint.Open(filepath.Join(dir, checkpoint.StepName(3))); err != nil {
			t.Fatalf("try %d: the winner's last checkpoint: %v", try, err)
		}
	}
	t.Logf("a run takes %v; %d of 20 second runs were refused by the lock", took.Round(time.Millisecond), locked)
	if locked == 0 {
		t.Errorf("no try overlapped the two runs: the lock was never tested")
	}
}

// gatedMetrics blocks the run's metrics write of step n until open is
// closed (the run holds its directory meanwhile).
type gatedMetrics struct {
	n       int
	reached chan struct{}
	open    chan struct{}
}

func (g *gatedMetrics) Write(p []byte) (int, error) {
	if g.n--; g.n == 0 {
		close(g.reached)
		<-g.open
	}
	return len(p), nil
}

// Issue 29: a --resume of a copy pointed at a directory another run was
// still writing overwrote that run's later steps and exited 0. The resume
// is refused the same way, naming the writer.
func TestResumeForkRefusedWhileWriting(t *testing.T) {
	j := tinyJob("dp=2,zero=1")
	j.Train.Steps = 6
	dir := filepath.Join(t.TempDir(), "a")
	j.Checkpoint = checkpoint.Config{Dir: dir, Every: 1}
	g := &gatedMetrics{n: 3, reached: make(chan struct{}), open: make(chan struct{})}
	done := make(chan error, 1)
	go func() { _, err := Run(context.Background(), Options{Job: j, Metrics: g}); done <- err }()
	<-g.reached // step 3 done, not yet saved: dir holds steps 1 and 2
	cp := filepath.Join(t.TempDir(), "copy")
	if err := exec.Command("cp", "-r", dir, cp).Run(); err != nil {
		close(g.open)
		t.Fatal(err)
	}
	_, err := Run(context.Background(), Options{Job: j, Resume: filepath.Join(cp, checkpoint.StepName(2))})
	close(g.open)
	if err := <-done; err != nil {
		t.Fatalf("the first run: %v", err)
	}
	if !errors.Is(err, checkpoint.ErrLocked) || !strings.Contains(err.Error(), "checkpoint.dir="+dir+" is being written by pid") {
		t.Fatalf("resume of the copy into the writer's directory: %v", err)
	}
	steps, _ := checkpoint.Steps(dir)
	if len(steps) != 6 || steps[5] != 6 {
		t.Errorf("the first run's steps %v, want 1..6", steps)
	}
}
