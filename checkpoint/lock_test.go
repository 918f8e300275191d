package checkpoint

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// One writer per root: a second Acquire, in this process or another, is
// refused naming the holder's pid and run; after Release the root is free.
func TestLockOneWriter(t *testing.T) {
	root := filepath.Join(t.TempDir(), "ck")
	a, err := Acquire(root, "aaaa")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Acquire(root, "bbbb")
	want := fmt.Sprintf("checkpoint.dir=%s is being written by pid %d", root, os.Getpid())
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "run aaaa") {
		t.Fatalf("second writer: %v, want %q and run aaaa", err, want)
	}
	if h, busy := Busy(root); !busy || h.Run != "aaaa" {
		t.Errorf("Busy = %v %v", h, busy)
	}
	if err := CheckHeld(root); err != nil {
		t.Errorf("CheckHeld by the holder: %v", err)
	}
	a.Release()
	if _, busy := Busy(root); busy {
		t.Error("busy after Release")
	}
	if err := CheckHeld(root); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "nobody holds it") {
		t.Errorf("CheckHeld after Release: %v", err)
	}
	b, err := Acquire(root, "bbbb")
	if err != nil {
		t.Fatalf("after Release: %v", err)
	}
	defer b.Release()
	if b.Stale != nil {
		t.Errorf("a released lock of this process reported stale: %v", b.Stale)
	}
}

// Commit refuses to publish a step in a root this process does not hold.
func TestCommitChecksLock(t *testing.T) {
	root := filepath.Join(t.TempDir(), "ck")
	s, err := New(Config{Dir: root})
	if err != nil {
		t.Fatal(err)
	}
	save := func(step int) error {
		if err := s.WriteRank(step, 0, 1, []Shard{Float32Shard("w", []int{2}, 0, []float32{1, 2})}); err != nil {
			return err
		}
		_, err := s.Commit(Manifest{Step: step, World: 1})
		return err
	}
	l, err := Acquire(root, "aaaa")
	if err != nil {
		t.Fatal(err)
	}
	if err := save(1); err != nil {
		t.Fatalf("holder's save: %v", err)
	}
	l.Release()
	// Another process's record in the lock file (as after a takeover).
	os.WriteFile(filepath.Join(root, LockFile), []byte(`{"pid":1,"host":"elsewhere","run":"bbbb"}`), 0o644)
	if err := save(2); !errors.Is(err, ErrLocked) {
		t.Fatalf("save without the lock: %v", err)
	}
	if steps, _ := Steps(root); len(steps) != 1 {
		t.Errorf("steps %v, want only step 1", steps)
	}
}

// A lock whose process died is taken over, and the dead holder recognised.
func TestLockStaleAfterKill(t *testing.T) {
	root := filepath.Join(t.TempDir(), "ck")
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockHelperProcess$")
	cmd.Env = append(os.Environ(), "CHECKPOINT_LOCK_HELPER="+root)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "locked") {
		t.Fatalf("helper: %q %v", line, err)
	}
	_, err = Acquire(root, "mine")
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", cmd.Process.Pid)) || !strings.Contains(err.Error(), "run child") {
		t.Fatalf("while the child holds it: %v", err)
	}
	cmd.Process.Kill() // kill -9: the kernel drops its lock
	cmd.Wait()
	l, err := Acquire(root, "mine")
	if err != nil {
		t.Fatalf("after the holder died: %v", err)
	}
	defer l.Release()
	if l.Stale == nil || l.Stale.PID != cmd.Process.Pid || l.Stale.Run != "child" {
		t.Errorf("stale holder %v, want the child's pid %d", l.Stale, cmd.Process.Pid)
	}
}

// TestLockHelperProcess holds a lock for TestLockStaleAfterKill.
func TestLockHelperProcess(t *testing.T) {
	root := os.Getenv("CHECKPOINT_LOCK_HELPER")
	if root == "" {
		t.Skip("helper process")
	}
	if _, err := Acquire(root, "child"); err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("locked")
	time.Sleep(time.Minute)
	os.Exit(0)
}
