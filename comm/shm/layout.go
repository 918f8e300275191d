package shm

// Segment layout. One file per group, mapped by every member:
//
//	header   one page: identity, parameters, attach count, the break record
//	member m one page of control words (pid, state, progress counter,
//	         doorbell, op descriptors), then Depth staging slots of SliceBytes
//	ring     one per ordered pair (src, dst), src ≠ dst: head and tail
//	         counters on their own cache lines, then RingBytes of data
//
// Every shared word sits on its own 64-byte line where two ranks write
// near it, so that a rank spinning on a peer's counter does not steal the
// line the peer is writing.
const (
	line     = 64
	pageSize = 4096
	magic    = 0x314d534c4c455254 // "TRELLSM1", little-endian
	version  = 1

	// header offsets
	hMagic    = 0
	hVersion  = 8
	hSize     = 12
	hNonce    = 16
	hSlice    = 24
	hDepth    = 32
	hRing     = 36
	hBytes    = 40
	hAttached = 48
	hBroken   = 1 * line // 0 healthy, 1 being written, 2 published
	hKind     = 1*line + 4
	hBlame    = 1*line + 8
	hOpLen    = 1*line + 12
	hWhyLen   = 1*line + 16
	hOp       = 2 * line // maxOp bytes
	hWhy      = 3 * line // maxWhy bytes
	maxOp     = 64
	maxWhy    = 1024

	// member control page offsets
	mPid      = 0
	mState    = 4
	mCounter  = 1 * line // progress: steps of collectives completed (futex word)
	mCountZz  = 1*line + 4
	mBell     = 2 * line // doorbell: bumped by senders to this rank (world segment)
	mBellZz   = 2*line + 4
	mHeld     = 3 * line // bytes of messages buffered for this rank's unposted receives
	mDesc     = 4 * line // descriptors of the collectives in flight, descSlots × descBytes
	descSlots = 16       // > the most ops a rank can run ahead of its slowest peer (Depth ≤ 8)
	descBytes = 32       // seq+1 u64, op u32, redop u32, root u32, dtype u32, n u64

	// ring header offsets
	rHead    = 0        // bytes written (sender)
	rTail    = 1 * line // bytes consumed (receiver)
	rTailEv  = 2 * line // bumped when tail moves (futex word the sender sleeps on)
	rTailZz  = 2*line + 4
	ringHead = 3 * line
)

// Member states.
const (
	stateFree     = 0
	stateAttached = 1
	stateClosed   = 2
)

// layout is where everything lives in a segment of p members.
type layout struct {
	p, slice, depth, ring int
	memberStride          int
	ringBase, ringStride  int
	total                 int
}

func newLayout(p, slice, depth, ring int) layout {
	l := layout{p: p, slice: slice, depth: depth, ring: ring}
	l.memberStride = pageSize + depth*slice
	l.ringBase = pageSize + p*l.memberStride
	l.ringStride = ringHead + ring
	l.total = roundUp(l.ringBase+p*(p-1)*l.ringStride, pageSize)
	return l
}

func (l layout) member(m int) int { return pageSize + m*l.memberStride }

// staging is the offset of member m's slot k.
func (l layout) staging(m, k int) int { return l.member(m) + pageSize + k*l.slice }

// ringOf is the offset of the ring from src to dst.
func (l layout) ringOf(src, dst int) int {
	d := dst
	if dst > src {
		d--
	}
	return l.ringBase + (src*(l.p-1)+d)*l.ringStride
}
