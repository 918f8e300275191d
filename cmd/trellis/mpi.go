package main

import (
	"fmt"

	"trellis/comm"
	"trellis/comm/mpi"
)

// mpiWorld joins the MPI world (parallel.backend=mpi): one rank per process
// under mpirun or srun. A binary built without -tags mpi refuses.
func mpiWorld() (comm.Group, error) {
	w, err := mpi.World(mpi.Config{})
	if err != nil {
		return nil, fmt.Errorf("parallel.backend=mpi: %w", err)
	}
	return w, nil
}

// closeWorld closes the process world; an MPI world also finalizes MPI.
func closeWorld(backend string, w comm.Group) {
	if backend == "mpi" {
		mpi.Finalize(w)
		return
	}
	w.Close()
}
