package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Issue 29: two trellis train processes started 0.2 s apart on one
// checkpoint.dir both exited 0. Now exactly one proceeds; the other's one
// line names the writer's pid.
func TestTwoProcessesOneDirectory(t *testing.T) {
	dir := t.TempDir()
	args := tiny("checkpoint.dir=shared", "train.steps=40", "checkpoint.every=5")
	a := exec.Command(trellisBin(t), args...)
	a.Dir = dir
	var aerr bytes.Buffer
	a.Stderr = &aerr
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	b := exec.Command(trellisBin(t), args...)
	b.Dir = dir
	var berr bytes.Buffer
	b.Stderr = &berr
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	ea, eb := a.Wait(), b.Wait()
	if (ea == nil) == (eb == nil) {
		t.Fatalf("exactly one run must proceed: first %v, second %v\n%s\n%s", ea, eb, aerr.String(), berr.String())
	}
	loser, winner := berr.String(), a.Process.Pid
	if ea != nil {
		loser, winner = aerr.String(), b.Process.Pid
	}
	msg := strings.TrimSpace(loser)
	want := fmt.Sprintf("checkpoint.dir=shared is being written by pid %d", winner)
	if !strings.Contains(msg, want) || !strings.Contains(msg, "(run ") {
		t.Errorf("the refused run says %q, want %q and the run", msg, want)
	}
}
