/* Open MPI alone: 64 MiB fp32 MPI_Allreduce (blocking) and MPI_Iallreduce
 * polled with MPI_Test, busbw = 2(n-1)/n * bytes / time, the slowest rank's
 * mean over ITERS after 2 untimed. Tells MPI's own speed on this machine
 * from the comm/mpi binding's (scripts/bench_busbw.sh builds and runs it).
 *
 *   mpicc -O2 -o mpi_allreduce scripts/mpi_allreduce.c
 *   mpirun -np 2 ./mpi_allreduce [ITERS]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static double timed(float *x, int n, int iters, int nonblocking) {
	MPI_Barrier(MPI_COMM_WORLD);
	double t0 = MPI_Wtime();
	for (int i = 0; i < iters; i++) {
		if (!nonblocking) {
			MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
			continue;
		}
		MPI_Request r;
		int done = 0;
		MPI_Iallreduce(MPI_IN_PLACE, x, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r);
		while (!done) MPI_Test(&r, &done, MPI_STATUS_IGNORE);
	}
	double t = (MPI_Wtime() - t0) / iters, worst;
	MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
	return worst;
}

int main(int argc, char **argv) {
	MPI_Init(&argc, &argv);
	int rank, size, iters = argc > 1 ? atoi(argv[1]) : 5;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	const int n = 16 << 20; /* 64 MiB of fp32 */
	float *x = malloc(sizeof(float) * n);
	for (int i = 0; i < n; i++) x[i] = 1.0f / (1 + i % 7);
	for (int nb = 0; nb < 2; nb++) {
		timed(x, n, 2, nb);
		double t = timed(x, n, iters < 1 ? 1 : iters, nb);
		if (rank == 0)
			printf("{\"op\": \"%s\", \"ranks\": %d, \"time_s\": %g, \"busbw_gbps\": %g}\n",
			       nb ? "iallreduce+test" : "allreduce", size, t, 2.0 * (size - 1) / size * 4.0 * n / t / 1e9);
	}
	free(x);
	MPI_Finalize();
	return 0;
}
