//go:build mpi

package mpi

/*
#cgo pkg-config: mpi
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

int t_init(int *provided) {
	int flag = 0;
	MPI_Initialized(&flag);
	if (flag) return MPI_Query_thread(provided);
	return MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, provided);
}
int t_multiple(void) { return MPI_THREAD_MULTIPLE; }
int t_finalize(void) {
	int flag = 0;
	MPI_Finalized(&flag);
	if (flag) return MPI_SUCCESS;
	return MPI_Finalize();
}
// t_world duplicates MPI_COMM_WORLD twice: c for the collectives and
// NewGroup (MPI_Comm_create_group sends on it with the user tag), pc for
// point-to-point, which the progress goroutine probes with MPI_ANY_TAG.
int t_world(MPI_Comm *c, MPI_Comm *pc, int *rank, int *size, int *tagub) {
	int e = MPI_Comm_dup(MPI_COMM_WORLD, c);
	if (e) return e;
	MPI_Comm_set_errhandler(*c, MPI_ERRORS_RETURN);
	e = MPI_Comm_dup(*c, pc);
	if (e) return e;
	MPI_Comm_set_errhandler(*pc, MPI_ERRORS_RETURN);
	MPI_Comm_rank(*c, rank);
	MPI_Comm_size(*c, size);
	int *ub, flag = 0;
	MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
	*tagub = flag ? *ub : 32767;
	return 0;
}
int t_sub(MPI_Comm parent, int *ranks, int n, int tag, MPI_Comm *c, MPI_Comm *pc) {
	MPI_Group pg, g;
	int e = MPI_Comm_group(parent, &pg);
	if (e) return e;
	e = MPI_Group_incl(pg, n, ranks, &g);
	if (e) return e;
	e = MPI_Comm_create_group(parent, g, tag, c);
	MPI_Group_free(&g);
	MPI_Group_free(&pg);
	if (e) return e;
	MPI_Comm_set_errhandler(*c, MPI_ERRORS_RETURN);
	e = MPI_Comm_dup(*c, pc);
	if (e == 0) MPI_Comm_set_errhandler(*pc, MPI_ERRORS_RETURN);
	return e;
}
MPI_Op t_op(int max) { return max ? MPI_MAX : MPI_SUM; }
int t_iallreduce(float *buf, int n, int max, MPI_Comm c, MPI_Request *r) {
	return MPI_Iallreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, t_op(max), c, r);
}
int t_ireduce_scatter(float *src, float *dst, int n, int max, MPI_Comm c, MPI_Request *r) {
	return MPI_Ireduce_scatter_block(src, dst, n, MPI_FLOAT, t_op(max), c, r);
}
// t_iallgather: src NULL means in place (src is this rank's chunk of dst).
int t_iallgather(void *src, void *dst, int bytes, MPI_Comm c, MPI_Request *r) {
	return MPI_Iallgather(src ? src : MPI_IN_PLACE, bytes, MPI_BYTE, dst, bytes, MPI_BYTE, c, r);
}
int t_ibcast(void *buf, int bytes, int root, MPI_Comm c, MPI_Request *r) {
	return MPI_Ibcast(buf, bytes, MPI_BYTE, root, c, r);
}
int t_ialltoall(void *src, void *dst, int bytes, MPI_Comm c, MPI_Request *r) {
	return MPI_Ialltoall(src, bytes, MPI_BYTE, dst, bytes, MPI_BYTE, c, r);
}
// t_ialltoallv: counts and displacements in bytes (rank-order reductions).
int t_ialltoallv(void *src, int *scounts, int *sdispls, void *dst, int *rcounts, int *rdispls, MPI_Comm c, MPI_Request *r) {
	return MPI_Ialltoallv(src, scounts, sdispls, MPI_BYTE, dst, rcounts, rdispls, MPI_BYTE, c, r);
}
// t_iallgatherv: in place, rank j's counts[j] bytes at displs[j] of buf.
int t_iallgatherv(void *buf, int *counts, int *displs, MPI_Comm c, MPI_Request *r) {
	return MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs, MPI_BYTE, c, r);
}
int t_ibarrier(MPI_Comm c, MPI_Request *r) { return MPI_Ibarrier(c, r); }
int t_isend(void *buf, int bytes, int peer, int tag, MPI_Comm c, MPI_Request *r) {
	return MPI_Isend(buf, bytes, MPI_BYTE, peer, tag, c, r);
}
// t_iprobe: a message from anyone with any tag, if one has arrived. Only
// the progress goroutine receives on the point-to-point communicator (under
// its lock), so the Irecv that follows with the probed source and tag takes
// exactly this message (MPI_Improbe would too, but crashes Open MPI 4.1
// under MPI_THREAD_MULTIPLE with large messages).
int t_iprobe(MPI_Comm c, int *flag, int *src, int *tag, int *bytes) {
	MPI_Status st;
	int e = MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, c, flag, &st);
	if (e || !*flag) return e;
	*src = st.MPI_SOURCE;
	*tag = st.MPI_TAG;
	return MPI_Get_count(&st, MPI_BYTE, bytes);
}
int t_irecv(void *buf, int bytes, int src, int tag, MPI_Comm c, MPI_Request *r) {
	return MPI_Irecv(buf, bytes, MPI_BYTE, src, tag, c, r);
}
int t_test(MPI_Request *r, int *flag) { return MPI_Test(r, flag, MPI_STATUS_IGNORE); }
void t_errstr(int e, char *s) { int n = 0; MPI_Error_string(e, s, &n); s[n < MPI_MAX_ERROR_STRING ? n : MPI_MAX_ERROR_STRING-1] = 0; }
int t_maxerr(void) { return MPI_MAX_ERROR_STRING; }
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"
)

// request is an outstanding MPI request.
type request = C.MPI_Request

// mpiErr turns an MPI return code into an error (nil for MPI_SUCCESS).
func mpiErr(call string, rc C.int) error {
	if rc == 0 {
		return nil
	}
	s := (*C.char)(C.malloc(C.size_t(C.t_maxerr())))
	defer C.free(unsafe.Pointer(s))
	C.t_errstr(rc, s)
	return fmt.Errorf("comm/mpi: %s: %s (MPI error %d)", call, C.GoString(s), int(rc))
}

// initMPI initializes MPI with MPI_THREAD_MULTIPLE, or checks the level of
// an MPI another component initialized.
func initMPI() error {
	var provided C.int
	if err := mpiErr("MPI_Init_thread", C.t_init(&provided)); err != nil {
		return err
	}
	if provided != C.t_multiple() {
		return errors.New("comm/mpi: the MPI library does not provide MPI_THREAD_MULTIPLE (it gave a lower level), which Trellis needs because groups progress concurrently; use an MPI built with thread support (Open MPI ≥ 3 or MPICH with --enable-threads=multiple)")
	}
	return nil
}

// finalize ends MPI in this process.
func finalize() error { return mpiErr("MPI_Finalize", C.t_finalize()) }

// Available reports whether the binary was built with MPI support.
func Available() bool { return true }

// ptr is the address of the first byte of b (nil if empty).
func ptr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

// test polls r once.
func test(r *request) (bool, error) {
	var flag C.int
	err := mpiErr("MPI_Test", C.t_test(r, &flag))
	return flag != 0, err
}
