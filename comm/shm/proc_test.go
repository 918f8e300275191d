package shm

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"trellis/comm"
)

// The test binary is also a worker process: with envChild set it joins
// the world the variables describe and runs a loop of all-reduces on the
// world and on a subgroup, printing "iter N" after each, until an
// operation fails (it prints the error and exits 1) or it has done
// envIters iterations.
const (
	envChild = "TRELLIS_SHM_TEST_CHILD"
	envIters = "TRELLIS_SHM_TEST_ITERS"
)

func TestMain(m *testing.M) {
	if os.Getenv(envChild) != "" {
		if err := child(); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func child() error {
	atoi := func(k string) int { n, _ := strconv.Atoi(os.Getenv(k)); return n }
	g, err := New(Config{Rank: atoi("RANK"), Size: atoi("WORLD_SIZE"), Name: os.Getenv(EnvName), Dir: os.Getenv(EnvDir),
		Timeout: 20 * time.Second, RendezvousTimeout: 20 * time.Second})
	if err != nil {
		return err
	}
	defer g.Close()
	var ranks []int
	for r := g.Size() - 1; r >= 0; r-- {
		ranks = append(ranks, r)
	}
	sub, err := g.NewGroup("reversed", ranks)
	if err != nil {
		return err
	}
	buf := make([]float32, 1<<16)
	for i := 0; i < atoi(envIters); i++ {
		if err := comm.AllReduce(g, comm.F32(buf), comm.Sum); err != nil {
			return err
		}
		if err := comm.AllReduce(sub, comm.F32(buf[:1000]), comm.Max); err != nil {
			return err
		}
		fmt.Println("iter", i)
	}
	return nil
}

// procs starts n worker processes of one world in dir.
type procs struct {
	cmds  []*exec.Cmd
	lines []chan string
}

func startProcs(t *testing.T, dir, name string, n, iters int) *procs {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &procs{}
	for r := range n {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), envChild+"=1", envIters+"="+strconv.Itoa(iters), EnvName+"="+name, EnvDir+"="+dir,
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(n))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		ch := make(chan string, 1<<16)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				ch <- sc.Text()
			}
			close(ch)
		}()
		p.cmds, p.lines = append(p.cmds, cmd), append(p.lines, ch)
	}
	t.Cleanup(func() {
		for _, c := range p.cmds {
			c.Process.Kill()
			c.Wait()
		}
	})
	return p
}

// TestKilledProcess: four processes loop on all-reduces; rank 2 is killed
// with SIGKILL. The other three fail within a second, each naming world
// rank 2, and nothing is left in the segment directory (every segment was
// removed once all ranks had mapped it), without anyone cleaning up.
func TestKilledProcess(t *testing.T) {
	dir := testDir(t)
	p := startProcs(t, dir, randomName(), 4, 1<<30)
	for r := range 4 { // every rank is looping
		for line := range p.lines[r] {
			if strings.HasPrefix(line, "iter 3") {
				break
			}
		}
	}
	killed := time.Now()
	p.cmds[2].Process.Signal(syscall.SIGKILL)
	for _, r := range []int{0, 1, 3} {
		var last string
		for line := range p.lines[r] {
			last = line
		}
		err := p.cmds[r].Wait()
		took := time.Since(killed)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Errorf("rank %d: %v, want exit status 1", r, err)
		}
		if !strings.Contains(last, "rank 2 failed") || !strings.Contains(last, "died") {
			t.Errorf("rank %d's last line %q does not say rank 2 died", r, last)
		}
		if took > time.Second {
			t.Errorf("rank %d exited %v after the kill, want within 1s", r, took)
		}
		t.Logf("rank %d after %v: %s", r, took.Round(time.Millisecond), last)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(left) > 0 {
		t.Errorf("left in %s after the job: %v", dir, left)
	}
}

// TestKilledBeforeAttach: a rank that dies before every rank attached
// leaves its world's file; RemoveSegments (the launcher's clean-up) takes
// it, and only the job's.
func TestKilledBeforeAttach(t *testing.T) {
	dir := testDir(t)
	name := randomName()
	other := filepath.Join(dir, "other-job-world")
	os.WriteFile(other, nil, 0o600)
	// A world of two whose rank 1 never comes: rank 0 creates the file and waits.
	q := startProcsSized(t, dir, name, 2, []int{0})
	path := filepath.Join(dir, name+"-world")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", path)
		}
		time.Sleep(5 * time.Millisecond)
	}
	q.cmds[0].Process.Signal(syscall.SIGKILL)
	q.cmds[0].Wait()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s is gone before the clean-up: %v", path, err)
	}
	n, err := RemoveSegments(dir, name)
	if err != nil || n != 1 {
		t.Fatalf("RemoveSegments: %d, %v; want 1 removed", n, err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("another job's file was removed: %v", err)
	}
}

// startProcsSized starts only the listed ranks of a world of n.
func startProcsSized(t *testing.T, dir, name string, n int, ranks []int) *procs {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &procs{}
	for _, r := range ranks {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), envChild+"=1", envIters+"=1", EnvName+"="+name, EnvDir+"="+dir,
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(n))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		p.cmds = append(p.cmds, cmd)
	}
	t.Cleanup(func() {
		for _, c := range p.cmds {
			c.Process.Kill()
			c.Wait()
		}
	})
	return p
}
