package main

import (
	"fmt"
	"io"

	"trellis/comm"
	"trellis/comm/commbench"
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

// benchMPI is trellis bench comm --backend mpi: every process of an mpirun
// (or srun) job measures on the MPI world and rank 0 prints the report,
// with the memcpy reference (--ranks is the job's size, not a flag's).
func benchMPI(out io.Writer, cfg commbench.Config, asJSON bool) error {
	w, err := mpiWorld()
	if err != nil {
		return fmt.Errorf("bench comm: --backend mpi: %w", err)
	}
	defer mpi.Finalize(w)
	cfg.Backend, cfg.Ranks = "mpi", w.Size()
	rows, err := commbench.Measure(w, cfg)
	if err != nil || w.Rank() != 0 {
		return err
	}
	rep := commbench.Report{Rows: rows}
	rep.Reference.MemcpyGBps = commbench.MemcpyGBps(5)
	if asJSON {
		return rep.WriteJSON(out)
	}
	rep.WriteTable(out)
	return nil
}
