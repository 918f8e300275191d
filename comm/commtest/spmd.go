package commtest

import (
	"errors"
	"fmt"
	"testing"

	"trellis/comm"
)

// SPMD mode. A backend whose ranks are processes that cannot share one test
// process (MPI: one rank per process) runs the same cases rank-local: the
// test binary is started once per rank (mpirun -np N) and each process calls
//
//	commtest.RunRank(t, world, sub)
//
// with its own world group. Every case then drives only this process's rank:
// a case for a world of n ranks runs on a fresh subgroup of world ranks
// 0..n-1 (ranks ≥ n sit it out), is skipped if n exceeds the world, and
// checks only what this rank received, computing the other ranks' inputs
// itself (they are deterministic). The in-process mode (Run) drives the very
// same cases with one goroutine per rank.
//
// Skipped in SPMD mode, with the reason: the failure cases (a rank that is
// silent, closes or is killed), because a backend with MPI's semantics aborts
// the whole job on a dead rank and cannot abandon an unfinished collective.

// Sub makes a subgroup of parent over ranks with the options a case asks
// for (its timeout and buffer bound). If RunRank is given nil, it uses
// parent.NewGroup and ignores the options.
type Sub func(parent comm.Group, name string, ranks []int, opts Options) (comm.Group, error)

const noFailures = "SPMD mode: a dead or silent rank ends an MPI job (mpirun aborts it) and an unfinished MPI collective cannot be abandoned, so the failure cases run in-process only"

// spmd is this process's world in SPMD mode.
type spmd struct {
	world comm.Group
	sub   Sub
	made  int // subgroups made so far: names them alike on every rank
}

func (s *spmd) size() int { return s.world.Size() }

// start makes a fresh subgroup of world ranks 0..n-1 for a case.
func (s *spmd) start(t *testing.T, n int, opts Options) World {
	t.Helper()
	if n > s.size() {
		t.Skipf("needs %d ranks; the SPMD world has %d (launch more processes to run it)", n, s.size())
	}
	s.made++
	groups := make([]comm.Group, n)
	me := s.world.Rank()
	if me >= n {
		return World{Groups: groups}
	}
	ranks := make([]int, n)
	for i := range ranks {
		ranks[i] = i
	}
	g, err := s.sub(s.world, fmt.Sprintf("commtest-%d", s.made), ranks, opts)
	if err != nil {
		t.Fatalf("subgroup of %d ranks for the case: %v", n, err)
	}
	groups[me] = g
	return World{Groups: groups}
}

// RunRank runs the suite in SPMD mode: this process drives world.Rank() of
// world, and every process of the world must call RunRank with the same
// arguments at the same time.
func RunRank(t *testing.T, world comm.Group, sub Sub) {
	if sub == nil {
		sub = func(p comm.Group, name string, ranks []int, _ Options) (comm.Group, error) {
			return p.NewGroup(name, ranks)
		}
	}
	s := &spmd{world: world, sub: sub}
	for _, c := range cases() {
		t.Run(c.name, func(t *testing.T) {
			if c.inProcess != "" {
				t.Skip(c.inProcess)
			}
			err := c.run(&env{t: t, spmd: s, large: largeElems()})
			if errors.Is(err, errSkip) {
				t.Skip("the backend's World has no Kill")
			}
			if err != nil {
				t.Error(err)
			}
		})
	}
}
