package mpi

import "time"

// DefaultTimeout is the deadline of one operation when Config.Timeout is 0.
const DefaultTimeout = 10 * time.Minute

// Config describes this process's rank of an MPI world. Rank and size come
// from MPI itself (mpirun, srun).
type Config struct {
	// Timeout is the deadline of every operation (a collective, a Send
	// until its buffer is free, a Recv until its message arrives, NewGroup):
	// past it the operation fails with a *comm.PeerError. Default 10 min.
	Timeout time.Duration
	// MaxBuffered bounds the bytes of messages received before their Recv
	// was posted, per group. Default comm.DefaultMaxBuffered.
	MaxBuffered int64
}

// UnderMPI reports whether the environment looks like an MPI launch (Open
// MPI's OMPI_COMM_WORLD_SIZE, MPICH's PMI_SIZE or PMIX_RANK).
func UnderMPI(getenv func(string) string) bool {
	for _, k := range []string{"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"} {
		if getenv(k) != "" {
			return true
		}
	}
	return false
}
