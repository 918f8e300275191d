package mpi

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// mpirun runs this test binary under mpirun with np processes, running the
// tests that match run, and returns the combined output. It skips the test
// when the binary has no MPI or mpirun is missing.
func mpirun(t *testing.T, np int, run string, args ...string) string {
	t.Helper()
	if !Available() {
		t.Skip("built without -tags mpi")
	}
	if UnderMPI(os.Getenv) {
		t.Skip("already under mpirun")
	}
	bin, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("mpirun not installed")
	}
	cmdArgs := append(mpirunFlags(np), os.Args[0], "-test.run", run, "-test.count=1")
	if testing.Short() && !slices.Contains(args, "-test.short") {
		cmdArgs = append(cmdArgs, "-test.short")
	}
	cmd := exec.Command(bin, append(cmdArgs, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mpirun -np %d: %v\nits first signs of trouble:\n%s\nthe end of its output:\n%s", np, err, trouble(string(out), 40), tail(string(out), 6000))
	}
	return string(out)
}

// trouble is the first n lines of out that name a failure, a panic, a
// fatal error, a signal or Open MPI's notice of a dead process: the
// cause, which a goroutine dump at the end of the output buries.
func trouble(out string, n int) string {
	var keep []string
	for _, line := range strings.Split(out, "\n") {
		l := strings.ToLower(line)
		if strings.Contains(l, "fail") || strings.Contains(l, "panic") || strings.Contains(l, "fatal") ||
			strings.Contains(l, "signal") || strings.Contains(l, "error") || strings.Contains(l, "exited on") || strings.Contains(l, "timed out") {
			if keep = append(keep, line); len(keep) == n {
				break
			}
		}
	}
	return strings.Join(keep, "\n")
}

// mpirunFlags are Open MPI's flags for a test on one machine: ranks may
// outnumber cores, root is allowed (containers), and the shared-memory
// transport copies through a buffer (single-copy needs ptrace rights that
// containers often lack).
func mpirunFlags(np int) []string {
	return []string{"--allow-run-as-root", "--oversubscribe", "-np", strconv.Itoa(np),
		"--mca", "btl_vader_single_copy_mechanism", "none"}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// TestMPIRun runs the conformance suite under mpirun with 2 and 4 ranks,
// and with 8 (the cases that need 5–8 ranks) on the short sizes.
func TestMPIRun(t *testing.T) {
	for _, np := range []int{2, 4, 8} {
		t.Run("np="+strconv.Itoa(np), func(t *testing.T) {
			args := []string{"-test.v"}
			if np == 8 {
				args = append(args, "-test.short")
			}
			out := mpirun(t, np, "^TestConformance$", args...)
			if strings.Count(out, "--- PASS: TestConformance (") != np {
				t.Fatalf("want %d ranks to pass TestConformance:\n%s", np, tail(out, 6000))
			}
			t.Logf("%d ranks passed; skipped cases: %d", np, strings.Count(out, "--- SKIP"))
		})
	}
}

// TestMPIRunRankOrder runs the conformance suite's rank-order cases
// (commtest.CheckRankOrder: all-reduce and reduce-scatter equal comm.Reduce
// folded in rank order, bit for bit) under mpirun with 3 and 4 ranks, the
// sizes at which MPI's own reduction algorithms would associate otherwise.
// TestMPIRun runs them too, among the whole suite.
func TestMPIRunRankOrder(t *testing.T) {
	for _, np := range []int{3, 4} {
		t.Run("np="+strconv.Itoa(np), func(t *testing.T) {
			out := mpirun(t, np, "^TestConformance$/^RankOrder/", "-test.v")
			if strings.Count(out, "--- PASS: TestConformance (") != np {
				t.Fatalf("want %d ranks to pass the rank-order cases:\n%s", np, tail(out, 6000))
			}
			if n := strings.Count(out, "--- PASS: TestConformance/RankOrder/n="+strconv.Itoa(np)); n != np {
				t.Fatalf("want RankOrder/n=%d to pass on %d ranks, passed on %d:\n%s", np, np, n, tail(out, 6000))
			}
		})
	}
}
