package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"trellis/checkpoint"
)

// Issue 29: two trellis train processes started 0.2 s apart on one
// checkpoint.dir both exited 0. Now, while one run holds the directory, a
// second is refused with one line naming the writer's pid and its run. The
// first run is long and is stopped once the second has been refused (a
// short one could finish before the second starts, which then rightly
// finds a finished run's checkpoints instead).
func TestTwoProcessesOneDirectory(t *testing.T) {
	dir := t.TempDir()
	args := tiny("checkpoint.dir=shared", "train.steps=100000", "checkpoint.every=5")
	a := exec.Command(trellisBin(t), args...)
	a.Dir = dir
	var aerr bytes.Buffer
	a.Stderr = &aerr
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		a.Process.Kill()
		a.Wait()
	}()
	lock := filepath.Join(dir, "shared", checkpoint.LockFile)
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(lock); err == nil && len(b) > 0 { // written once the lock is held
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first run wrote no %s in 2 minutes:\n%s", lock, aerr.String())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a second writer must not train on
	defer cancel()
	b := exec.CommandContext(ctx, trellisBin(t), args...)
	b.Dir = dir
	var berr bytes.Buffer
	b.Stderr = &berr
	if err := b.Run(); err == nil {
		t.Fatalf("a second run on a held checkpoint.dir proceeded:\n%s", berr.String())
	}
	if a.ProcessState != nil {
		t.Fatalf("the first run ended before the second was refused:\n%s", aerr.String())
	}
	msg := strings.TrimSpace(berr.String())
	want := fmt.Sprintf("checkpoint.dir=shared is being written by pid %d", a.Process.Pid)
	if !strings.Contains(msg, want) || !strings.Contains(msg, "(run ") {
		t.Errorf("the refused run says %q, want %q and the run", msg, want)
	}
}
