package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// restartSets is tiny for four launched workers (dp=4, the launcher's
// default plan), checkpointing every 5 of 40 steps.
func restartSets(ck string) []string {
	var sets []string
	for _, a := range tiny("checkpoint.dir="+ck, "checkpoint.every=5", "train.steps=40", "train.log_every=1",
		"train.micro_batch=1", "train.global_batch=4") {
		if a == "parallel.plan=dp=1" {
			sets = sets[:len(sets)-1]
			continue
		}
		sets = append(sets, a)
	}
	return sets
}

// kill -9 of one worker of four in the middle of a --max-restarts 2 run,
// and of another while the job restarts: the job finishes, its final loss
// equals the uninterrupted run's bit for bit, and the log names the dead
// rank, the checkpoint resumed and the steps redone.
func TestLaunchRestartsAfterKill(t *testing.T) {
	if testing.Short() {
		t.Skip("four processes, three times")
	}
	dir := t.TempDir()
	bin := trellisBin(t)
	launchArgs := func(ck, metrics string, extra ...string) []string {
		a := append([]string{"launch", "--nproc-per-node", "4", "--stop-grace", "1s"}, extra...)
		return append(append(append(a, "--", bin), restartSets(ck)...), "--metrics", metrics)
	}
	if r := run(t, dir, launchArgs("a", "a.jsonl")...); r.err != nil {
		t.Fatalf("uninterrupted: %v\n%s", r.err, r.stderr)
	}
	want := losses(t, filepath.Join(dir, "a.jsonl"))

	cmd, out := startIn(t, dir, bin, launchArgs("b", "b.jsonl", "--max-restarts", "2")...)
	defer cmd.Process.Kill()
	waitLines(t, out, filepath.Join(dir, "b.jsonl"), 12)
	first := workers(cmd.Process.Pid)
	kill9(t, first[2], out)
	waitUntil(t, out, "the restart", func() bool { return strings.Contains(out.String(), "restart 1 of 2") })
	var second map[int]int
	waitUntil(t, out, "four new workers", func() bool {
		second = workers(cmd.Process.Pid)
		return len(second) == 4 && second[1] != first[1]
	})
	kill9(t, second[1], out)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the restarted job failed: %v\n%s", err, out.String())
	}
	log := out.String()
	re := regexp.MustCompile(`trellis launch: rank 2 died \(signal: killed\); restart 1 of 2: resuming from checkpoint (\S+) \(step (\d+)\); (no steps|steps? \d+(-\d+)?) redone`)
	if m := re.FindStringSubmatch(log); m == nil || !strings.HasPrefix(m[1], "b/step-") {
		t.Errorf("no restart line naming rank 2, the checkpoint and the steps redone:\n%s", log)
	}
	if !strings.Contains(log, "trellis launch: rank 1 died (signal: killed); restart 2 of 2") {
		t.Errorf("no second restart naming rank 1:\n%s", log)
	}
	for _, l := range strings.Split(log, "\n") {
		if strings.HasPrefix(l, "trellis launch:") {
			t.Log(l)
		}
	}
	got := losses(t, filepath.Join(dir, "b.jsonl"))
	if len(got) != 40 || got[40] != want[40] {
		t.Fatalf("%d steps; final loss %v, uninterrupted %v", len(got), got[40], want[40])
	}
	for s, l := range want {
		if got[s] != l {
			t.Errorf("step %d: loss %v, uninterrupted %v", s, got[s], l)
		}
	}
}

// kill9 sends SIGKILL to pid, which must be a worker found (never 0 or
// -1, which would signal this test's process group or every process).
func kill9(t *testing.T, pid int, out *lockedBuf) {
	t.Helper()
	if pid <= 0 {
		t.Fatalf("no such worker (the job may have ended):\n%s", out.String())
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
}

// workers maps RANK to pid for the live children of the launcher ppid.
func workers(ppid int) map[int]int {
	out := map[int]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) < 2 || f[0] == "Z" || f[1] != strconv.Itoa(ppid) {
			continue
		}
		env, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		for _, kv := range bytes.Split(env, []byte{0}) {
			if r, ok := bytes.CutPrefix(kv, []byte("RANK=")); ok {
				if n, err := strconv.Atoi(string(r)); err == nil {
					out[n] = pid
				}
			}
		}
	}
	return out
}

// startIn starts bin with args in dir, its output gathered in the
// returned buffer; the caller kills it.
func startIn(t *testing.T, dir, bin string, args ...string) (*exec.Cmd, *lockedBuf) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	out := new(lockedBuf)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, out
}

// waitLines waits until the metrics file at path holds n lines.
func waitLines(t *testing.T, out *lockedBuf, path string, n int) {
	t.Helper()
	waitUntil(t, out, fmt.Sprintf("%d steps logged", n), func() bool {
		b, _ := os.ReadFile(path)
		return bytes.Count(b, []byte("\n")) >= n
	})
}

func waitUntil(t *testing.T, out *lockedBuf, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within 60s:\n%s", what, out.String())
		}
	}
}

// lockedBuf is an io.Writer safe for exec's copying goroutines.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// --max-restarts finds the checkpoint root among the worker's --set
// arguments, the last one winning.
func TestSetValue(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"train", "--set", "checkpoint.dir=a"}, "a"},
		{[]string{"train", "--set=checkpoint.dir=b", "--set", "train.steps=3"}, "b"},
		{[]string{"train", "--set", "checkpoint.dir=a", "--set", "checkpoint.dir=c"}, "c"},
		{[]string{"train", "--set", "checkpoint.every=5"}, ""},
		{[]string{"train", "--set"}, ""},
	} {
		if got := setValue(c.args, "checkpoint.dir"); got != c.want {
			t.Errorf("%q: %q, want %q", c.args, got, c.want)
		}
	}
}

// A smaller world resumes by resharding: a job of four processes
// (dp=4,zero=3) stopped at step 4 continues as two (dp=2,zero=1, named:
// a resumed job keeps its checkpoint's plan otherwise), and its next
// steps' losses match the two-process run's within 1e-5 relative.
func TestLaunchedShrinkReshards(t *testing.T) {
	if testing.Short() {
		t.Skip("three launched jobs")
	}
	dir := t.TempDir()
	bin := trellisBin(t)
	sets := restartSets("x")
	sets = append(sets, "--set", "train.steps=8", "--set", "checkpoint.every=0")
	launched := func(n int, extra ...string) result {
		a := append([]string{"launch", "--nproc-per-node", strconv.Itoa(n), "--", bin}, sets...)
		return run(t, dir, append(a, extra...)...)
	}
	if r := launched(2, "--set", "checkpoint.dir=two", "--metrics", "two.jsonl", "--parallel", "dp=2,zero=1"); r.err != nil {
		t.Fatalf("two processes: %v\n%s", r.err, r.stderr)
	}
	if r := launched(4, "--set", "checkpoint.dir=four", "--metrics", "shrunk.jsonl", "--until", "4", "--parallel", "dp=4,zero=3"); r.err != nil {
		t.Fatalf("four processes to step 4: %v\n%s", r.err, r.stderr)
	}
	r := launched(2, "--set", "checkpoint.dir=four", "--metrics", "shrunk.jsonl", "--resume", "four", "--parallel", "dp=2,zero=1")
	if r.err != nil {
		t.Fatalf("resumed as two processes: %v\n%s", r.err, r.stderr)
	}
	if !strings.Contains(r.stderr, "msg=resharding") {
		t.Errorf("the resumed job did not say it reshards:\n%s", r.stderr)
	}
	want, got := losses(t, filepath.Join(dir, "two.jsonl")), losses(t, filepath.Join(dir, "shrunk.jsonl"))
	if len(got) != 8 {
		t.Fatalf("%d steps logged, want 8", len(got))
	}
	for s := 5; s <= 8; s++ {
		if d := got[s] - want[s]; d > 1e-5*want[s] || -d > 1e-5*want[s] {
			t.Errorf("step %d: loss %.9g after shrinking, %.9g in the two-process run", s, got[s], want[s])
		}
	}
}

// Elastic shrink: kill -9 of one worker of four in the middle of a
// --nproc-per-node 3:4 run gives up its slot; the job restarts on three
// workers, re-derives dp=3 (global batch 12 kept: 4 micro-batches per
// step instead of 3), resumes from the last checkpoint by resharding and
// finishes. Its losses equal, bit for bit, an uninterrupted four-worker
// run up to that checkpoint and a three-worker run resumed from it by
// hand (--parallel dp=3,zero=3) after it: the same plans from the same
// state, so the elastic path adds nothing. (That a resharded resume
// follows the smaller world's trajectory within 1e-5 is
// TestLaunchedShrinkReshards'.)
func TestLaunchElasticShrinkAfterKill(t *testing.T) {
	if testing.Short() {
		t.Skip("three launched jobs")
	}
	dir := t.TempDir()
	bin := trellisBin(t)
	sets := append(restartSets("x"), "--set", "train.global_batch=12", "--set", "train.steps=20")
	launched := func(n string, restarts string, worker ...string) []string {
		a := []string{"launch", "--nproc-per-node", n, "--stop-grace", "1s", "--max-restarts", restarts, "--", bin}
		return append(append(a, sets...), worker...)
	}
	cmd, out := startIn(t, dir, bin, launched("3:4", "1", "--set", "checkpoint.dir=e", "--metrics", "e.jsonl")...)
	defer cmd.Process.Kill()
	waitLines(t, out, filepath.Join(dir, "e.jsonl"), 7)
	kill9(t, workers(cmd.Process.Pid)[2], out)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the elastic job failed: %v\n%s", err, out.String())
	}
	log := out.String()
	re := regexp.MustCompile(`trellis launch: rank 2 died \(signal: killed\); restart 1 of 1: slot 2 lost after 1 failure\(s\); the world shrinks from 4 to 3 workers \(minimum 3\), ranks renumbered; resuming from checkpoint e/step-0*(\d+) \(step (\d+)\); (no steps|steps? \S+) redone`)
	m := re.FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("no restart line naming rank 2, the lost slot, the new world and the checkpoint:\n%s", log)
	}
	t.Log(m[0])
	if !strings.Contains(log, `parallel.plan=dp=3,zero=3: elastic: \"dp=4,zero=3\" re-derived for 3 workers (dp 4→3; train.global_batch=12 kept, 4 micro-batches per step instead of 3)`) ||
		!strings.Contains(log, "msg=resharding") {
		t.Errorf("the resumed job did not say how it re-derived its plan and that it reshards:\n%s", log)
	}
	step := m[2]
	if r := run(t, dir, launched("4", "0", "--set", "checkpoint.dir=a", "--metrics", "a.jsonl", "--until", step)...); r.err != nil {
		t.Fatalf("four workers to step %s: %v\n%s", step, r.err, r.stderr)
	}
	if r := run(t, dir, launched("3", "0", "--resume", "a", "--parallel", "dp=3,zero=3", "--metrics", "a.jsonl")...); r.err != nil {
		t.Fatalf("three workers resumed by hand: %v\n%s", r.err, r.stderr)
	}
	want, got := losses(t, filepath.Join(dir, "a.jsonl")), losses(t, filepath.Join(dir, "e.jsonl"))
	if len(got) != 20 || len(want) != 20 {
		t.Fatalf("%d steps logged (the reference %d), want 20", len(got), len(want))
	}
	for s := 1; s <= 20; s++ {
		if got[s] != want[s] {
			t.Errorf("step %d: loss %.9g in the elastic job, %.9g resharded at step %s by hand", s, got[s], want[s], step)
		}
	}
}

// Under an elastic launcher a plan that cannot shrink onto the world is
// one line naming why, with exit status 2 (launch.ExitConfig), so the
// launcher does not restart it.
func TestElasticPlanThatCannotMapExits2(t *testing.T) {
	cmd := exec.Command(trellisBin(t), tiny("parallel.plan=dp=2,tp=2")...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "RANK=0", "WORLD_SIZE=3", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=1", "TRELLIS_ELASTIC=1")
	out, err := cmd.CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "cannot run on 3 workers: the world must be a multiple of tp×pp×cp = 2") {
		t.Errorf("got %v:\n%s", err, out)
	}
}
