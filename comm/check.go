package comm

import (
	"fmt"
	"unsafe"

	"trellis/tensor"
)

// Argument checks shared by the backends, so that both reject the same calls
// with the same messages. A backend runs the check when an operation is
// issued; an operation that fails it returns a finished Work whose error wraps
// ErrArgs and is not issued at all, so the group stays usable.
//
// In place. AllReduce and Broadcast work in place. AllGather may take as src
// this rank's own chunk of dst, and ReduceScatter as dst this rank's own chunk
// of src (the in-place forms sharded optimizers use); any other overlap of dst
// and src is an error. size is the group size, rank this rank in the group.

// CheckReduceOp accepts Sum, Avg and Max.
func CheckReduceOp(op ReduceOp) error {
	if op > Max {
		return fmt.Errorf("%w: unknown reduce op %v", ErrArgs, op)
	}
	return nil
}

// CheckAllReduce checks an AllReduce.
func CheckAllReduce(buf Buf, op ReduceOp) error {
	if err := CheckReduceOp(op); err != nil {
		return fmt.Errorf("allreduce: %w", err)
	}
	return nil
}

// CheckReduceScatter checks len(src) = size·len(dst), equal dtypes and
// overlap.
func CheckReduceScatter(dst, src Buf, op ReduceOp, rank, size int) error {
	if err := CheckReduceOp(op); err != nil {
		return fmt.Errorf("reducescatter: %w", err)
	}
	return checkChunks("reducescatter", "src", "dst", src, dst, rank, size)
}

// CheckAllGather checks len(dst) = size·len(src), equal dtypes and overlap.
func CheckAllGather(dst, src Buf, rank, size int) error {
	return checkChunks("allgather", "dst", "src", dst, src, rank, size)
}

// checkChunks checks that whole (named wname) is size chunks of part (named
// pname) and that part is either disjoint from whole or exactly its chunk
// number rank.
func checkChunks(op, wname, pname string, whole, part Buf, rank, size int) error {
	if whole.DType() != part.DType() {
		return fmt.Errorf("%w: %s: %s is %v but %s is %v", ErrArgs, op, wname, whole.DType(), pname, part.DType())
	}
	if whole.Len() != size*part.Len() {
		return fmt.Errorf("%w: %s: len(%s)=%d, want group size × len(%s) = %d × %d",
			ErrArgs, op, wname, whole.Len(), pname, size, part.Len())
	}
	n := part.Len()
	if overlap(whole, part) && !same(whole.Slice(rank*n, (rank+1)*n), part) {
		return fmt.Errorf("%w: %s: %s overlaps %s other than as this rank's chunk %d", ErrArgs, op, pname, wname, rank)
	}
	return nil
}

// CheckBroadcast checks the root.
func CheckBroadcast(buf Buf, root, size int) error {
	if root < 0 || root >= size {
		return fmt.Errorf("%w: broadcast: root %d out of range [0, %d)", ErrArgs, root, size)
	}
	return nil
}

// CheckAllToAll checks len(dst) = len(src), divisible by size, equal dtypes,
// no overlap.
func CheckAllToAll(dst, src Buf, size int) error {
	if dst.DType() != src.DType() {
		return fmt.Errorf("%w: alltoall: dst is %v but src is %v", ErrArgs, dst.DType(), src.DType())
	}
	if dst.Len() != src.Len() || src.Len()%size != 0 {
		return fmt.Errorf("%w: alltoall: len(dst)=%d and len(src)=%d must be equal and divisible by the group size %d",
			ErrArgs, dst.Len(), src.Len(), size)
	}
	if overlap(dst, src) {
		return fmt.Errorf("%w: alltoall: dst and src overlap", ErrArgs)
	}
	return nil
}

// CheckPeer checks the peer of a Send or Recv (op names it).
func CheckPeer(op string, peer, size int) error {
	if peer < 0 || peer >= size {
		return fmt.Errorf("%w: %s: peer %d out of range [0, %d)", ErrArgs, op, peer, size)
	}
	return nil
}

// MaxTag bounds the tags of Send and Recv: 0 ≤ tag < MaxTag.
const MaxTag = 1 << 62

// CheckTag checks the tag of a Send or Recv (op names it).
func CheckTag(op string, tag int) error {
	if tag < 0 || tag >= MaxTag {
		return fmt.Errorf("%w: %s: tag %d is out of range [0, 2^62)", ErrArgs, op, tag)
	}
	return nil
}

// CheckP2P checks the peer and the tag of a Send or Recv.
func CheckP2P(op string, peer, tag, size int) error {
	if err := CheckPeer(op, peer, size); err != nil {
		return err
	}
	return CheckTag(op, tag)
}

// CheckMatch checks that a received message fits the receive buffer: same
// dtype and length.
func CheckMatch(recv Buf, sentType tensor.DType, sentLen int) error {
	if recv.DType() != sentType || recv.Len() != sentLen {
		return fmt.Errorf("%w: recv: buffer is %d × %v but the message is %d × %v",
			ErrArgs, recv.Len(), recv.DType(), sentLen, sentType)
	}
	return nil
}

// CheckNewGroup checks a subgroup's rank list: not empty, ranks of the parent
// (size) without repeats, and containing rank, this rank in the parent. It
// returns this rank's index in the list, its rank in the subgroup.
func CheckNewGroup(name string, ranks []int, rank, size int) (int, error) {
	if len(ranks) == 0 {
		return 0, fmt.Errorf("%w: newgroup %q: empty rank list", ErrArgs, name)
	}
	me := -1
	seen := make(map[int]bool, len(ranks))
	for i, r := range ranks {
		if r < 0 || r >= size {
			return 0, fmt.Errorf("%w: newgroup %q: rank %d out of range [0, %d)", ErrArgs, name, r, size)
		}
		if seen[r] {
			return 0, fmt.Errorf("%w: newgroup %q: rank %d listed twice", ErrArgs, name, r)
		}
		seen[r] = true
		if r == rank {
			me = i
		}
	}
	if me < 0 {
		return 0, fmt.Errorf("%w: newgroup %q: called by rank %d, which is not in %v", ErrArgs, name, rank, ranks)
	}
	return me, nil
}

// span returns the address range [lo, hi) of b's elements.
func span(b Buf) (lo, hi uintptr) {
	var p unsafe.Pointer
	if f := b.Float32s(); f != nil {
		p = unsafe.Pointer(unsafe.SliceData(f))
	} else if h := b.BFloat16s(); h != nil {
		p = unsafe.Pointer(unsafe.SliceData(h))
	}
	lo = uintptr(p)
	return lo, lo + uintptr(b.Bytes())
}

// overlap reports whether a and b share memory.
func overlap(a, b Buf) bool {
	if a.Len() == 0 || b.Len() == 0 {
		return false
	}
	alo, ahi := span(a)
	blo, bhi := span(b)
	return alo < bhi && blo < ahi
}

// same reports whether a and b are the same elements.
func same(a, b Buf) bool {
	alo, ahi := span(a)
	blo, bhi := span(b)
	return alo == blo && ahi == bhi
}
