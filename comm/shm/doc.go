// Package shm is the comm backend for the ranks of one host: processes
// that map the same shared-memory files (in /dev/shm) and move data
// through them, with no kernel copy and no socket in the way.
//
//	g, err := shm.New(shm.Config{Rank: r, Size: n, Name: os.Getenv(shm.EnvName)})
//
// # Segments
//
// Every group is one file, Dir/Name-… , mapped by each member: a header;
// per member a page of control words (its process id, its progress
// counter, its doorbell, the descriptors of the collectives it is running)
// and Depth staging slots of SliceBytes; and a ring of RingBytes for every
// ordered pair of members (point-to-point). Every page is allocated when
// the file is made (fallocate), so a /dev/shm too small for it is an error
// naming it then, not a SIGBUS later; Usable checks a directory first.
// Rank 0 makes the world's file (replacing a stale one) and New waits
// until every rank has mapped it and claimed its slot; a subgroup's file
// is made by whichever member gets there first, published whole under a
// temporary name and linked into place, and named after the world, the
// group's key and how many such groups were made, so NewGroup needs no
// communication. The last member to map a file removes it: the memory
// lives until the last member exits, and a job leaves nothing in /dev/shm
// however it ends, unless a rank dies before every rank has mapped a
// file — a launcher removes those with RemoveSegments (package launch
// does, after its workers exit).
//
// # Collectives
//
// A group's collectives run on its comm.Queue in issue order, in slices
// of SliceBytes through each member's Depth staging slots, and in rounds:
// round r of a collective runs phase i of slice r − i for every phase
// (the copy in of slice r, the fold of slice r − 1, the copy out of slice
// r − 2), then publishes the member's step count; round r starts once
// every member has published round r − 1. All members run the same
// collectives with the same arguments, so they take the same steps, a
// slot is read only a round after it was written, and written again three
// slices later, after every read (Depth ≥ 3). Each collective checks that
// every member issued the same one (operation, reduction, root, dtype,
// length) the first time it waits on it: a mismatch breaks the group with
// comm.ErrArgs. The algorithms are in algo_linux.go; the all-reduce, with
// p members and n elements per slice: member r copies chunks q ≠ r of its
// slice into its slot, folds chunk r of all p slices — its own from its
// buffer, the others from their slots — in rank order 0, 1, …, p−1 with
// comm.ReduceTo into its buffer and its slot, and copies every other
// chunk's result from its owner's slot. The fold is comm/local's, chunk for
// chunk, so the bits are too (commtest.CheckRankOrder). Each member copies
// (p−1)/p·n elements in and as many out and folds n/p elements p ways per
// slice: comm/local's fold plus two copies, which is what a transport
// between private address spaces costs (docs/BENCHMARKS.md measures it).
// S slices take S + 2 rounds, one wait each; with more ranks than cores a
// wait hands a core to another rank, so slices are then 4 MiB, not 1.
//
// # Waiting
//
// A wait polls the peer's counter, yielding to this process's other
// goroutines, for a spin budget, then sleeps on the counter as a futex
// word (every publish wakes its sleepers). The budget adapts between
// 1 µs and Config.Spin: it doubles after a spin that caught the peer and
// halves after one that did not, so on a host with more ranks than cores
// (or other work) a rank stops spinning on a peer that is not running and
// gives it the core. A wait sleeps at most 10 ms at a time, and between
// naps checks the group's break record, whether the awaited member's
// process is alive (a pidfd: a kill -9 is found within about 20 ms) and
// the deadline (Config.Timeout), past which the awaited member is blamed
// with comm.ErrTimeout.
//
// # Point-to-point
//
// Send and Recv run outside the queue (see comm). A Send writes the
// message — a 32-byte header and the payload — into the ring to its peer
// and completes; what does not fit is written by a goroutine as space
// frees. Each rank runs one drainer goroutine that sleeps on its doorbell
// (rung by every writer) and moves arriving messages into the oldest
// posted Recv of their (peer, tag) or, if none, into the mailbox (at most
// MaxBuffered bytes per group, else comm.ErrBufferFull naming the
// sender), so a Send never waits for its Recv. The drainer also fails
// receives whose sender died or stayed silent past the Timeout. A
// collective drains the rings when it completes, so a message sent before
// a peer entered the collective is accounted by then (Stats.Buffered).
//
// # Failure
//
// The first member to find a failure (a dead process, a timeout, a member
// that closed, a mailbox overflow) writes a break record into the group's
// header and wakes every sleeper; every member's pending and later
// operations then fail with the *comm.PeerError it describes, naming the
// world rank (Config.WorldRanks). A condition that already holds wins
// over a break: a peer that closed after publishing what a member needs
// does not fail that member's collective. Abort lets a composite backend
// (comm/hier) break a group with an error found elsewhere.
//
// Linux only (shared mappings, futexes, pidfds); elsewhere New reports it.
package shm
