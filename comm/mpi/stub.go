//go:build !mpi

package mpi

import (
	"errors"

	"trellis/comm"
)

// ErrNotBuilt is World's error in a binary built without the mpi tag.
var ErrNotBuilt = errors.New("comm/mpi: this binary was built without -tags mpi (rebuild with CC=mpicc go build -tags mpi ./cmd/trellis)")

// Available reports whether the binary was built with MPI support.
func Available() bool { return false }

// World fails: the binary has no MPI.
func World(cfg Config) (comm.Group, error) { return nil, ErrNotBuilt }

// Finalize does nothing without MPI.
func Finalize(world comm.Group) error { return nil }
