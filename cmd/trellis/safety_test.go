package main

import (
	"bufio"
	"bytes"
	"errors"
	"net"
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

// Resuming from a copied checkpoint writes next to the copy and leaves the
// original run's directory exactly as it was; a fork behind the copy's
// latest step is refused, and goes to its own directory when asked.
func TestCopiedCheckpointResume(t *testing.T) {
	dir := t.TempDir()
	if r := run(t, dir, tiny("checkpoint.dir=a", "checkpoint.every=5", "checkpoint.keep=0")...); r.err != nil {
		t.Fatalf("run a: %v\n%s", r.err, r.stderr)
	}
	before := treeHash(t, filepath.Join(dir, "a"))
	if err := exec.Command("cp", "-r", filepath.Join(dir, "a"), filepath.Join(dir, "c1")).Run(); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(filepath.Join(dir, "c1", "step-00000010")) // the copy was taken at step 5
	os.WriteFile(filepath.Join(dir, "c1", "latest"), []byte("step-00000005\n"), 0o644)
	r := run(t, dir, "train", "--resume", "c1/step-00000005", "--until", "8")
	if r.err != nil {
		t.Fatalf("resume the copy: %v\n%s", r.err, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "c1", "step-00000008", "index.json")); err != nil {
		t.Errorf("the resumed run did not write next to its checkpoint: %v", err)
	}
	// a's copy holds steps 5 and 10: resuming at 5 there would re-point latest.
	r = run(t, dir, "train", "--resume", "a/step-00000005", "--until", "8")
	checkOneLineError(t, r, []string{"checkpoint.dir=a", "already holds step 10"})
	r = run(t, dir, "train", "--resume", "a/step-00000005", "--until", "8", "--set", "checkpoint.dir=fork")
	if r.err != nil {
		t.Fatalf("fork into its own directory: %v\n%s", r.err, r.stderr)
	}
	if treeHash(t, filepath.Join(dir, "a")) != before {
		t.Errorf("the original run's directory changed")
	}
}

// --metrics on resume keeps the steps up to the checkpoint and appends
// behind them: every step once, every line valid JSON, even when the
// interrupted run had logged steps past its checkpoint and a partial line.
func TestMetricsAcrossResume(t *testing.T) {
	dir := t.TempDir()
	if r := run(t, dir, append(tiny("checkpoint.dir=ck"), "--until", "5", "--metrics", "m.jsonl")...); r.err != nil {
		t.Fatalf("first part: %v\n%s", r.err, r.stderr)
	}
	f, _ := os.OpenFile(filepath.Join(dir, "m.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"step":6,"loss":9}` + "\n" + `{"step":7,"lo`) // logged after the checkpoint, then a crash
	f.Close()
	if r := run(t, dir, "train", "--resume", "ck", "--metrics", "m.jsonl"); r.err != nil {
		t.Fatalf("resume: %v\n%s", r.err, r.stderr)
	}
	l := losses(t, filepath.Join(dir, "m.jsonl")) // fails on a bad line
	lines := strings.Count(string(readFile(t, filepath.Join(dir, "m.jsonl"))), "\n")
	if len(l) != 10 || lines != 10 || l[6] == 9 {
		t.Errorf("%d steps in %d lines (step 6 loss %v), want steps 1..10 once", len(l), lines, l[6])
	}
}

// Two runs with default settings get a directory each (the second says
// where); a run pointed explicitly at another run's directory refuses it,
// naming it and what to do; neither changes the first run's checkpoints.
func TestTwoDefaultRuns(t *testing.T) {
	dir := t.TempDir()
	if r := run(t, dir, tiny()...); r.err != nil {
		t.Fatalf("first run: %v\n%s", r.err, r.stderr)
	}
	first := filepath.Join(dir, "runs", "trellis")
	before := treeHash(t, first)
	r := run(t, dir, tiny("train.steps=3")...)
	if r.err != nil || !strings.Contains(r.stderr, "checkpoint.dir=runs/trellis-2") {
		t.Fatalf("second run: %v\n%s", r.err, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "runs", "trellis-2", "step-00000003")); err != nil {
		t.Errorf("the second run's checkpoint: %v", err)
	}
	r = run(t, dir, tiny("train.steps=3", "checkpoint.dir=runs/trellis")...)
	checkOneLineError(t, r, []string{"checkpoint.dir=runs/trellis", "--resume runs/trellis", "checkpoint.dir=runs/NAME"})
	if treeHash(t, first) != before {
		t.Errorf("the later runs changed the first run's checkpoints")
	}
	s := run(t, dir, "sample", "--checkpoint", "runs/trellis", "--tokens", "3")
	if s.err != nil {
		t.Errorf("sample the first run: %v %s", s.err, s.stderr)
	}
}

// Ctrl-C checkpoints at the end of the step and prints the exact resume
// command; running it finishes the run with every step logged once.
func TestInterruptThenResume(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(trellisBin(t), append(tiny("checkpoint.dir=ck", "train.steps=100000"), "--metrics", "m.jsonl")...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile(filepath.Join(dir, "m.jsonl"))
		if bytes.Count(b, []byte("\n")) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("no progress: %s", stderr.String())
		}
	}
	cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err == nil {
		t.Fatalf("an interrupted run exited 0")
	}
	m := regexp.MustCompile(`resume with: trellis (train --resume (\S+) --metrics m\.jsonl)`).FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("no resume command in:\n%s", stderr.String())
	}
	if _, err := os.Stat(filepath.Join(dir, m[2], "index.json")); err != nil {
		t.Fatalf("the named checkpoint: %v", err)
	}
	done := len(losses(t, filepath.Join(dir, "m.jsonl")))
	args := append(strings.Fields(m[1]), "--set", "train.steps="+strconv.Itoa(done+3))
	if r := run(t, dir, args...); r.err != nil {
		t.Fatalf("%v: %v\n%s", args, r.err, r.stderr)
	}
	if l := losses(t, filepath.Join(dir, "m.jsonl")); len(l) != done+3 {
		t.Errorf("%d steps logged, want %d", len(l), done+3)
	}
}

// Under a launcher, train without --backend runs one rank per process and
// the launcher's world size decides dp; a pinned plan of another size is
// refused before anything is written.
func TestLaunchedWithoutBackend(t *testing.T) {
	dir := t.TempDir()
	bin := trellisBin(t)
	var sets []string // tiny, without its plan: the launcher decides
	for _, a := range tiny("checkpoint.dir=ck") {
		if a == "parallel.plan=dp=1" {
			sets = sets[:len(sets)-1]
			continue
		}
		sets = append(sets, a)
	}
	args := append([]string{"launch", "--nproc-per-node", "2", "--", bin}, append(sets, "--metrics", "m.jsonl")...)
	r := run(t, dir, args...)
	if r.err != nil {
		t.Fatalf("launched: %v\n%s%s", r.err, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, `plan="dp=2,`) || len(losses(t, filepath.Join(dir, "m.jsonl"))) != 10 {
		t.Errorf("want a dp=2 run with 10 metrics lines:\n%s", r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "ck", "step-00000010", "rank-00001-of-00002.safetensors")); err != nil {
		t.Errorf("no two-rank checkpoint: %v", err)
	}
	args = append([]string{"launch", "--nproc-per-node", "2", "--", bin}, append(sets, "--set", "checkpoint.dir=ck2", "--parallel", "dp=4,mbs=1")...)
	r = run(t, dir, args...)
	if r.err == nil || !strings.Contains(r.stderr, "needs 4 ranks, but the launcher (trellis launch) started 2") {
		t.Errorf("a dp=4 plan under 2 processes: %v\n%s", r.err, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "ck2")); err == nil {
		t.Errorf("the refused run wrote its checkpoint directory")
	}
	// The command, on the default model: two processes, dp=2.
	r = run(t, dir, "launch", "--nproc-per-node", "2", "--", bin, "train", "--set", "train.steps=1",
		"--set", "train.eval_batches=0", "--set", "train.sample_every=-1", "--set", "checkpoint.dir=")
	if r.err != nil {
		t.Errorf("trellis launch --nproc-per-node 2 -- trellis train: %v\n%s", r.err, r.stderr)
	}
}

// --metrics that cannot be written fails before step 1, with nothing
// written.
func TestMetricsPathChecked(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "adir"), 0o755)
	for _, c := range []struct{ path, want string }{
		{"adir", "is a directory"},
		{"no/such/m.jsonl", "directory no/such does not exist"},
	} {
		r := run(t, dir, append(tiny("checkpoint.dir=ck"), "--metrics", c.path)...)
		checkOneLineError(t, r, []string{"--metrics " + c.path, c.want})
		if _, err := os.Stat(filepath.Join(dir, "ck")); err == nil {
			t.Errorf("%s: the run wrote checkpoints", c.path)
		}
	}
}

// Ctrl-C to trellis launch reaches every worker once: they stop after the
// same step, checkpoint, and rank 0 prints the resume command, which
// finishes the run under the launcher.
func TestLaunchedInterruptThenResume(t *testing.T) {
	dir := t.TempDir()
	bin := trellisBin(t)
	var sets []string
	for _, a := range tiny("checkpoint.dir=ck", "train.steps=100000") {
		if a == "parallel.plan=dp=1" {
			sets = sets[:len(sets)-1]
			continue
		}
		sets = append(sets, a)
	}
	cmd := exec.Command(bin, append([]string{"launch", "--nproc-per-node", "2", "--", bin}, append(sets, "--metrics", "m.jsonl")...)...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile(filepath.Join(dir, "m.jsonl"))
		if bytes.Count(b, []byte("\n")) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("no progress: %s", out.String())
		}
	}
	cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err == nil {
		t.Fatalf("an interrupted launch exited 0")
	}
	m := regexp.MustCompile(`\[rank 0\] trellis: interrupted after step (\d+); checkpoint (\S+); resume with: trellis train --resume (\S+)`).FindStringSubmatch(out.String())
	if m == nil || m[2] != m[3] {
		t.Fatalf("no resume command from rank 0 in:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "[rank 1] trellis: interrupted after step "+m[1]+"; checkpoint "+m[2]) {
		t.Errorf("rank 1 did not stop at step %s with the same checkpoint:\n%s", m[1], out.String())
	}
	done, _ := strconv.Atoi(m[1])
	args := []string{"launch", "--nproc-per-node", "2", "--", bin, "train", "--resume", m[2], "--metrics", "m.jsonl", "--set", "train.steps=" + strconv.Itoa(done+2)}
	if r := run(t, dir, args...); r.err != nil {
		t.Fatalf("%v: %v\n%s", args, r.err, r.stderr)
	}
	if l := losses(t, filepath.Join(dir, "m.jsonl")); len(l) != done+2 {
		t.Errorf("%d steps logged, want %d", len(l), done+2)
	}
}

// On a second node, the node's local rank 0 shows the progress (as
// torchrun users expect); rank 0 alone writes --metrics.
func TestSecondNodeShowsProgress(t *testing.T) {
	dir := t.TempDir()
	bin := trellisBin(t)
	port := freeTCPPort(t)
	var sets []string
	for _, a := range tiny("checkpoint.dir=ck", "train.steps=3", "train.log_every=1") {
		if a == "parallel.plan=dp=1" {
			sets = sets[:len(sets)-1]
			continue
		}
		sets = append(sets, a)
	}
	node := func(rank string) *exec.Cmd {
		args := append([]string{"launch", "--nnodes", "2", "--node-rank", rank, "--nproc-per-node", "1",
			"--master-addr", "127.0.0.1", "--master-port", port, "--", bin}, append(sets, "--metrics", "m"+rank+".jsonl")...)
		c := exec.Command(bin, args...)
		c.Dir = dir
		c.Env = append(os.Environ(), "TRELLIS_JOB_TOKEN=0123456789abcdef0123456789abcdef")
		return c
	}
	n1 := node("1")
	var out1 bytes.Buffer
	n1.Stdout, n1.Stderr = &out1, &out1
	if err := n1.Start(); err != nil {
		t.Fatal(err)
	}
	out0, err := node("0").CombinedOutput()
	if err1 := n1.Wait(); err != nil || err1 != nil {
		t.Fatalf("node 0: %v\n%s\nnode 1: %v\n%s", err, out0, err1, out1.String())
	}
	if !strings.Contains(out1.String(), "[rank 1] time=") || !strings.Contains(out1.String(), "msg=step step=3") {
		t.Errorf("node 1 shows no progress:\n%s", out1.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "m1.jsonl")); err == nil {
		t.Errorf("rank 1 wrote a metrics file")
	}
	if l := losses(t, filepath.Join(dir, "m0.jsonl")); len(l) != 3 {
		t.Errorf("rank 0's metrics: %d steps", len(l))
	}
}

func freeTCPPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// A second Ctrl-C aborts at once (exit 130) instead of finishing the step.
// The second signal is sent once the first has been seen (two SIGINTs sent
// back to back may reach the process as one: the kernel does not queue them).
func TestSecondInterruptAborts(t *testing.T) {
	dir := t.TempDir()
	// The default model on one device without a budget: steps long enough
	// that both signals land inside one.
	cmd := exec.Command(trellisBin(t), "train", "--parallel", "dp=1", "--device-memory", "0", "--set", "train.threads=1",
		"--set", "train.sample_every=-1", "--set", "data.cache_dir=off", "--set", "checkpoint.dir=ck", "--metrics", "m.jsonl")
	cmd.Dir = dir
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		stderr strings.Builder
	)
	seen := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pipe)
		once := sync.Once{}
		for sc.Scan() {
			mu.Lock()
			stderr.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if strings.Contains(sc.Text(), "interrupt again") {
				once.Do(func() { close(seen) })
			}
		}
	}()
	text := func() string { mu.Lock(); defer mu.Unlock(); return stderr.String() }
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if b, _ := os.ReadFile(filepath.Join(dir, "m.jsonl")); len(b) > 0 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("no progress: %s", text())
		}
	}
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-seen:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("the first interrupt was not acknowledged: %s", text())
	}
	cmd.Process.Signal(syscall.SIGINT)
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 || !strings.Contains(text(), "aborted") {
		t.Errorf("exit %v, want 130 and \"aborted\":\n%s", err, text())
	}
}
