// Package comm defines how ranks talk: the Group interface that every backend
// implements (comm/local for goroutines in one process, comm/shm for the
// processes of one host, comm/tcp for processes and hosts, comm/mpi under
// mpirun, comm/hier composing an intra-host and an inter-host backend;
// comm/world opens them by name), the payload type Buf, and the async Work
// handle.
//
// Ordering. A group's collectives (everything but Send and Recv) run in the
// order they were issued, one at a time, on that group's own queue (think of
// a CUDA stream). Every member must issue the same collectives in the same
// order. A rank may belong to many groups; different groups progress
// concurrently.
//
// Point-to-point. Send and Recv do not occupy the queue: each is posted the
// moment it is issued and completes on its own, independently of the
// collectives and of other sends and receives. A message is matched by
// (sender, receiver, tag) only; messages with the same (peer, tag) are
// matched first in, first out, in the order the sends and the receives were
// issued. So no issue order deadlocks: two ranks may each Recv then Send,
// or one Recv-then-Send while the other Sends-then-Recvs, with any number of
// operations in flight. A pipeline stage posts its step's receives and
// sends, possibly as one BatchP2P, and waits on them:
//
//	w := comm.BatchP2P(g, []comm.P2POp{
//		comm.RecvOp(act, prev, tagAct), // from the previous stage
//		comm.SendOp(grad, prev, tagGrad),
//	})
//	... compute ...
//	err := w.Wait()
//
// Send completes once its buffer may be reused, which never waits for the
// matching Recv: a message that arrives before its Recv is posted is
// buffered by the receiver. Buffered bytes are bounded (the backend's
// MaxBuffered, DefaultMaxBuffered unless configured); a message beyond the
// bound fails the group with ErrBufferFull, naming the sender, rather than
// growing memory without limit. Stats.Buffered reports the bytes held now,
// for the caller to charge to its `comm` memory tag. A Send and a
// collective issued on the same group may progress in either order: use
// different buffers, or wait for one before issuing the other.
//
// Async and blocking. Every operation returns a Work immediately; Wait blocks
// until it is done. The blocking forms are the package functions AllReduce,
// ReduceScatter, ... which issue and wait. The caller must not touch a
// buffer passed to an operation until its Work has been waited on.
//
// Failure. Every operation has a deadline (the backend's timeout). A peer that
// dies or stops answering makes every pending operation on every rank return a
// *PeerError that names it, never a hang. After an error, a group is broken:
// later operations fail fast with the same error.
//
// Layout conventions, for a group of size p:
//
//	AllReduce(buf)            buf ← op over ranks of buf
//	ReduceScatter(dst, src)   len(src) = p·len(dst); rank r gets op over ranks of src[r·n:(r+1)·n]
//	AllGather(dst, src)       len(dst) = p·len(src); dst[r·n:(r+1)·n] = src of rank r
//	Broadcast(buf, root)      buf ← buf of root
//	AllToAll(dst, src)        len(src) = len(dst) = p·n; dst[r·n:(r+1)·n] = src[me·n:(me+1)·n] of rank r
//	Send(buf, peer, tag)      matched by Recv(buf, me, tag) on peer; messages with the same
//	Recv(buf, peer, tag)      (peer, tag) arrive in order; 0 ≤ tag < MaxTag. Send completes
//	                          once buf may be reused. Neither waits for the queue.
//
// Ranks in a Group's methods are ranks within that group (0..Size()-1).
package comm

import (
	"errors"
	"fmt"
	"time"

	"trellis/tensor"
)

// ReduceOp is the reduction of AllReduce and ReduceScatter.
type ReduceOp uint8

// Reductions. Avg is Sum divided by the group size.
const (
	Sum ReduceOp = iota
	Avg
	Max
)

func (o ReduceOp) String() string {
	switch o {
	case Sum:
		return "sum"
	case Avg:
		return "avg"
	case Max:
		return "max"
	}
	return fmt.Sprintf("reduceop(%d)", uint8(o))
}

// Buf is a payload: a slice of fp32 or of bf16. bf16 halves the bytes moved;
// reductions over bf16 accumulate in fp32 and round once per step of the
// algorithm.
type Buf struct {
	f32  []float32
	bf16 []tensor.BF16Bits
	kind tensor.DType
}

// F32 wraps an fp32 slice.
func F32(s []float32) Buf { return Buf{f32: s, kind: tensor.F32} }

// BF16 wraps a bf16 slice.
func BF16(s []tensor.BF16Bits) Buf { return Buf{bf16: s, kind: tensor.BF16} }

// DType is the element type.
func (b Buf) DType() tensor.DType { return b.kind }

// Len is the number of elements.
func (b Buf) Len() int {
	if b.kind == tensor.BF16 {
		return len(b.bf16)
	}
	return len(b.f32)
}

// Bytes is the payload size.
func (b Buf) Bytes() int { return b.Len() * b.kind.Size() }

// Float32s is the fp32 slice (nil for a bf16 Buf).
func (b Buf) Float32s() []float32 { return b.f32 }

// BFloat16s is the bf16 slice (nil for an fp32 Buf).
func (b Buf) BFloat16s() []tensor.BF16Bits { return b.bf16 }

// Slice returns elements [lo, hi) as a Buf sharing memory.
func (b Buf) Slice(lo, hi int) Buf {
	if b.kind == tensor.BF16 {
		return BF16(b.bf16[lo:hi])
	}
	return F32(b.f32[lo:hi])
}

// Work is the handle of an issued operation.
type Work interface {
	// Wait blocks until the operation is done and returns its error. It may be
	// called more than once and from several goroutines.
	Wait() error
}

// Group is a set of ranks that communicate. Implementations are safe for use
// by the goroutines of the rank that owns them.
type Group interface {
	Rank() int // this rank within the group
	Size() int
	// GlobalRanks maps group ranks to world ranks.
	GlobalRanks() []int

	AllReduce(buf Buf, op ReduceOp) Work
	ReduceScatter(dst, src Buf, op ReduceOp) Work
	AllGather(dst, src Buf) Work
	Broadcast(buf Buf, root int) Work
	AllToAll(dst, src Buf) Work
	Send(buf Buf, peer, tag int) Work
	Recv(buf Buf, peer, tag int) Work
	Barrier() Work

	// NewGroup makes a subgroup of the listed ranks (ranks of this group, in
	// the order that defines the subgroup's ranks). It is called by exactly
	// the listed ranks, with the same name and list; it needs no
	// communication. Distinct names give distinct groups over the same ranks,
	// each with its own queue.
	NewGroup(name string, ranks []int) (Group, error)

	// Stats reports this rank's time in communication on this group.
	Stats() Stats
	// Close releases the group's resources. Pending work fails.
	Close() error
}

// Stats accounts one rank's communication on one group.
type Stats struct {
	Ops   int64         // operations completed
	Bytes int64         // payload bytes this rank passed to operations
	Busy  time.Duration // time collectives were in flight on the queue (from when each could start to its end), plus time with point-to-point operations in flight: total communication time
	Wait  time.Duration // time callers spent blocked in Work.Wait (exposed communication)
	// Skew is the part of Wait spent before the last member had arrived at
	// the operation, less its Crowded part: waiting for peers still
	// computing, not for the transfer. Backends that cannot tell when the
	// last member arrived report 0 (all of Wait is then the transfer's,
	// or the cores').
	Skew time.Duration
	// Crowded is the part of Wait that the rank's share of the cores ran
	// other ranks' work, where ranks outnumber the cores they share (see
	// Crowding; 0 otherwise): waiting for cores, not for peers or the
	// transfer. Skew and Crowded are disjoint (Crowding.Parts).
	Crowded time.Duration
	// Buffered is the memory, in bytes, that messages sent to this rank on
	// this group occupy now because they arrived before their Recv was
	// posted (a gauge, not a total: charge it to the `comm` memory tag).
	// It is bounded: see ErrBufferFull.
	Buffered int64
}

// Add returns s + o (Buffered gauges add too: the sum over groups).
func (s Stats) Add(o Stats) Stats {
	return Stats{Ops: s.Ops + o.Ops, Bytes: s.Bytes + o.Bytes, Busy: s.Busy + o.Busy, Wait: s.Wait + o.Wait,
		Skew: s.Skew + o.Skew, Crowded: s.Crowded + o.Crowded, Buffered: s.Buffered + o.Buffered}
}

// PeerClosedText is how a transport describes a peer that closed its end
// in good order while an operation still needed it: the peer is alive and
// gave up on its own (it failed on another peer, or was stopped), so it is
// not where a failure began; a launcher looking for the rank that failed
// first looks past it (launch.blamedRank).
const PeerClosedText = "closed its connection (the rank called Close)"

// Errors. Match with errors.Is.
var (
	// ErrTimeout: an operation passed its deadline.
	ErrTimeout = errors.New("comm: timeout")
	// ErrPeer: a peer died, closed its connection or stopped answering; the
	// error is a *PeerError naming it.
	ErrPeer = errors.New("comm: peer failed")
	// ErrClosed: the group was closed.
	ErrClosed = errors.New("comm: group closed")
	// ErrArgs: the arguments of an operation are inconsistent (lengths,
	// ranks, dtypes).
	ErrArgs = errors.New("comm: bad arguments")
	// ErrBufferFull: messages sent to a rank that has not posted their
	// receives exceed the backend's bound on buffered bytes (a sender far
	// ahead of its receiver, or a receive that is never posted).
	ErrBufferFull = errors.New("comm: too many bytes buffered for receives not yet posted")
)

// PeerError names the world rank that failed.
type PeerError struct {
	Rank int // world rank of the failed peer
	Op   string
	Err  error // the underlying cause
}

func (e *PeerError) Error() string {
	return fmt.Sprintf("comm: %s: rank %d failed: %v", e.Op, e.Rank, e.Err)
}

// Is matches ErrPeer, and ErrTimeout when the cause was a timeout.
func (e *PeerError) Is(target error) bool { return target == ErrPeer }

// Unwrap returns the cause.
func (e *PeerError) Unwrap() error { return e.Err }

// Blocking forms: issue and wait.

// AllReduce reduces buf in place across the group.
func AllReduce(g Group, buf Buf, op ReduceOp) error { return g.AllReduce(buf, op).Wait() }

// ReduceScatter reduces src across the group; rank r receives chunk r in dst.
func ReduceScatter(g Group, dst, src Buf, op ReduceOp) error {
	return g.ReduceScatter(dst, src, op).Wait()
}

// AllGather concatenates every rank's src into dst, in rank order.
func AllGather(g Group, dst, src Buf) error { return g.AllGather(dst, src).Wait() }

// Broadcast copies root's buf to every rank.
func Broadcast(g Group, buf Buf, root int) error { return g.Broadcast(buf, root).Wait() }

// AllToAll exchanges equal chunks between every pair of ranks.
func AllToAll(g Group, dst, src Buf) error { return g.AllToAll(dst, src).Wait() }

// Send sends buf to peer with tag.
func Send(g Group, buf Buf, peer, tag int) error { return g.Send(buf, peer, tag).Wait() }

// Recv receives into buf from peer with tag.
func Recv(g Group, buf Buf, peer, tag int) error { return g.Recv(buf, peer, tag).Wait() }

// Barrier returns once every rank of the group has entered it.
func Barrier(g Group) error { return g.Barrier().Wait() }
