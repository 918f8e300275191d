// Prototypes of the MPI wrappers defined in cmpi.go (build tag mpi).
#include <mpi.h>
#include <stdlib.h>
int t_world(MPI_Comm *c, MPI_Comm *pc, int *rank, int *size, int *tagub);
int t_sub(MPI_Comm parent, int *ranks, int n, int tag, MPI_Comm *c, MPI_Comm *pc);
int t_iallreduce(float *buf, int n, int max, MPI_Comm c, MPI_Request *r);
int t_ireduce_scatter(float *src, float *dst, int n, int max, MPI_Comm c, MPI_Request *r);
int t_iallgather(void *src, void *dst, int bytes, MPI_Comm c, MPI_Request *r);
int t_ibcast(void *buf, int bytes, int root, MPI_Comm c, MPI_Request *r);
int t_ialltoall(void *src, void *dst, int bytes, MPI_Comm c, MPI_Request *r);
int t_ialltoallv(void *src, int *scounts, int *sdispls, void *dst, int *rcounts, int *rdispls, MPI_Comm c, MPI_Request *r);
int t_iallgatherv(void *buf, int *counts, int *displs, MPI_Comm c, MPI_Request *r);
int t_ibarrier(MPI_Comm c, MPI_Request *r);
int t_isend(void *buf, int bytes, int peer, int tag, MPI_Comm c, MPI_Request *r);
int t_iprobe(MPI_Comm c, int *flag, int *src, int *tag, int *bytes);
int t_irecv(void *buf, int bytes, int src, int tag, MPI_Comm c, MPI_Request *r);
