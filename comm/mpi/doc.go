// Package mpi is the comm backend over MPI (Open MPI or MPICH), for clusters
// whose InfiniBand and shared-memory transports MPI already drives. It is
// built only with the mpi build tag and cgo against the MPI library:
//
//	CC=mpicc go build -tags mpi ./cmd/trellis
//	mpirun -np 4 ./trellis train --backend mpi ...
//
// Without the tag the package is a stub whose World reports that the binary
// was built without -tags mpi, so the default static CGO_ENABLED=0 binary
// does not depend on MPI.
//
// # Mapping onto MPI
//
// One process is one rank (MPI cannot host several ranks in one process).
// World initializes MPI with MPI_THREAD_MULTIPLE, because a rank's groups
// progress concurrently from several goroutines (OS threads), and refuses to
// start if the library does not provide it. Every Group owns a communicator:
// the world group a duplicate of MPI_COMM_WORLD, a subgroup one made by
// MPI_Comm_create_group with the parent's ranks in the listed order and a
// tag hashed from the name (so "a" and "b" over the same ranks are distinct
// communicators). Unlike the other backends, NewGroup therefore communicates:
// it is a blocking collective over the listed ranks (with the deadline), and
// ranks that share several new groups must create them in the same order.
//
// Collectives run on the group's comm.Queue, one at a time in issue order,
// each as MPI's non-blocking form (MPI_Iallreduce, MPI_Ireduce_scatter_block,
// MPI_Iallgather, MPI_Ibcast, MPI_Ialltoall, MPI_Ibarrier; the rank-order
// reductions below MPI_Ialltoallv and MPI_Iallgatherv) polled with
// MPI_Test until done or until the deadline (Config.Timeout), which turns a
// hang into a *comm.PeerError. The queue's goroutine polls without sleeping
// (yielding to the rank's other goroutines), because MPI progresses a
// non-blocking collective mostly inside MPI_Test: a collective in flight
// costs a core's worth of polling, which overlapped computation shares.
// Each group has two communicators: one for the collectives and NewGroup,
// one for point-to-point. Copies (all-gather, broadcast, all-to-all,
// point-to-point) move raw bytes.
//
// # Reductions: rank order, bit for bit
//
// All-reduce and reduce-scatter give bit for bit what comm/local and
// comm/tcp give: every element is comm.Reduce of the p ranks' values folded
// left to right in rank order 0, 1, …, p-1 (in fp32; bf16 widened and
// rounded once; Avg the sum times comm.AvgScale(p)), so an MPI job equals
// the same job on in-process ranks. fp32 addition is not associative and
// MPI_SUM leaves the association to the library (with Open MPI 4.1.4 and
// 4 ranks, MPI_Iallreduce was up to 1280 ulps from rank order on the
// conformance suite's values; with 3 it happened to match), so with p ≥ 3
// a reduction does not use it. Rank r receives chunk r of every other rank's
// buffer with one MPI_Ialltoallv (chunk j = elements ⌊j·n/p⌋ … ⌊(j+1)·n/p⌋,
// so n need not divide by p; bf16 travels as bf16) and folds the p chunks
// with comm.Reduce; an all-reduce then shares the folded chunks with an
// in-place MPI_Iallgatherv. Both phases run inside the one queued
// operation, each polled to its own deadline; the Work completes when the
// last is done. The traffic per rank is a ring's, (p-1)/p of the buffer
// each way per phase, but the fold runs in Go on the queue's goroutine,
// not inside MPI (cost: docs/BENCHMARKS.md). With p = 2 every order is rank
// order up to commutation (x⊕y = y⊕x), so MPI_Iallreduce and
// MPI_Ireduce_scatter_block with MPI_SUM or MPI_MAX run (a bf16 payload
// widened into fp32 C memory and rounded back once: MPI has no bf16).
// commtest.CheckRankOrder holds every backend to this (the conformance
// suite's RankOrder cases; TestMPIRunRankOrder under mpirun -np 3 and 4).
// Payloads above 2³¹−1 bytes are refused with comm.ErrArgs (MPI counts are
// int).
//
// Memory. Go memory handed to a non-blocking MPI call is pinned
// (runtime.Pinner) until MPI_Test reports the request complete. A request
// that passes its deadline cannot be cancelled in MPI, so its memory stays
// pinned (or its C staging allocated) for the life of the process: the group
// is broken anyway.
//
// Point-to-point, outside the queue. A Send is an MPI_Isend; the message's
// MPI tag carries the user tag and the dtype (tag·2 + bf16), so tags must
// stay below MPI_TAG_UB/2 (2³⁰ on Open MPI). Each group runs one progress
// goroutine, the only receiver on the group's point-to-point communicator,
// that finds arriving messages with MPI_Iprobe (any source, any tag: MPI's
// non-overtaking rule keeps each sender's messages in order) and receives
// each with MPI_Irecv from that source and tag: into the oldest posted Recv
// for that (peer, tag), or, if
// none is posted, into a Go buffer counted in Stats.Buffered, bounded by
// Config.MaxBuffered (beyond it the group fails with comm.ErrBufferFull,
// naming the sender). Since the receiver always drains, a Send completes
// without waiting for the matching Recv, as comm requires. While one of
// the group's collectives is waited for, its waiter does the draining
// (every 200 µs) and the progress goroutine sleeps, so that a rank has one
// polling thread, not two: on a host with no spare core each wake-up of the
// second took a core from a polling rank and stalled the collective
// (0.22 against 0.91 GB/s, 64 MiB on 2 ranks of 2 vCPUs).
//
// # Failure
//
// MPI's failure semantics are not Trellis's: a process that dies makes
// mpirun (or srun) abort the whole job, by default within seconds, so a
// rank rarely sees a *comm.PeerError for a dead peer; the communicators are
// set to MPI_ERRORS_RETURN so that errors MPI reports become errors here,
// not aborts. A peer that is alive but stops participating (a hang) makes
// every pending operation on the other ranks fail with a *comm.PeerError
// (cause comm.ErrTimeout) at the deadline, and the group is broken. The
// conformance suite's kill, close and silent-peer cases are therefore
// skipped under MPI.
//
// Finalize(world) must be called once at the end of the process: it closes
// every group made from world and calls MPI_Finalize (mpirun treats a rank
// that exits without it as failed).
package mpi
