//go:build mpi

package mpi

import (
	"fmt"
	"os"
	"testing"

	"trellis/comm"
	"trellis/comm/commtest"
)

// TestMain starts this process's rank when mpirun started it, and
// finalizes MPI after the tests.
func TestMain(m *testing.M) {
	if !UnderMPI(os.Getenv) {
		os.Exit(m.Run())
	}
	w, err := World(Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	world = w
	code := m.Run()
	if err := Finalize(w); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

// TestConformance is the conformance suite in SPMD mode, one rank per
// process; it runs only under mpirun (TestMPIRun starts it).
func TestConformance(t *testing.T) {
	if !UnderMPI(os.Getenv) {
		t.Skip("not started by mpirun (TestMPIRun runs this test under mpirun -np 2 and 4)")
	}
	commtest.RunRank(t, world, func(p comm.Group, name string, ranks []int, o commtest.Options) (comm.Group, error) {
		return p.(*group).NewGroupConfig(name, ranks, Config{Timeout: o.Timeout, MaxBuffered: o.MaxBuffered})
	})
}

// world is this process's world group under mpirun (set by TestMain before
// the tests run, read-only after).
var world comm.Group
