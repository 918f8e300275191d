package shm

import (
	"fmt"
	"time"

	"trellis/comm"
	"trellis/tensor"
)

// Collectives move data in slices through each member's staging slots, in
// rounds (see rounds). Every member publishes its progress as a count of
// steps (its counter); all members run the same operations with the same
// arguments, so they take the same steps, and "member q has done what I
// just did" is "q's counter ≥ mine".

// coll is one collective in progress on this member.
type coll struct {
	g       *group
	op      string
	seq     uint64
	desc    [4]uint64 // op code, redop, root, dtype
	n       uint64    // element count every member must agree on
	checked []bool    // peers whose descriptor matched
	arrived bool      // the queue has been told when the last member arrived
}

// opCode is the code of op in descriptors.
func opCode(op string) uint64 {
	switch op {
	case "allreduce":
		return 1
	case "reducescatter":
		return 2
	case "allgather":
		return 3
	case "broadcast":
		return 4
	case "alltoall":
		return 5
	}
	return 6
}

// begin starts a collective: it writes this member's descriptor of it
// (checked by each peer the first time it waits on this member).
func (g *group) begin(op string, redop comm.ReduceOp, root int, dt tensor.DType, n int) *coll {
	c := &coll{g: g, op: op, seq: g.seq, n: uint64(n), checked: make([]bool, g.Size()),
		desc: [4]uint64{opCode(op), uint64(redop), uint64(root), uint64(dt)}}
	g.seq++
	m, off := g.seg.m, g.l().member(g.me)+mDesc+int(c.seq%descSlots)*descBytes
	m.u32(off + 8).Store(uint32(c.desc[0]))
	m.u32(off + 12).Store(uint32(c.desc[1]))
	m.u32(off + 16).Store(uint32(c.desc[2]))
	m.u32(off + 20).Store(uint32(c.desc[3]))
	m.u64(off + 24).Store(c.n)
	m.u64(off).Store(c.seq + 1)
	return c
}

// checkDesc compares member q's descriptor of this collective with ours.
func (c *coll) checkDesc(q int) error {
	if c.checked[q] {
		return nil
	}
	g := c.g
	m, off := g.seg.m, g.l().member(q)+mDesc+int(c.seq%descSlots)*descBytes
	theirs := [4]uint64{uint64(m.u32(off + 8).Load()), uint64(m.u32(off + 12).Load()), uint64(m.u32(off + 16).Load()), uint64(m.u32(off + 20).Load())}
	n, seq := m.u64(off+24).Load(), m.u64(off).Load()
	if seq != c.seq+1 || theirs != c.desc || n != c.n {
		why := fmt.Sprintf("member %d issued %s (op %d, reduce %d, root %d, dtype %d) of %d elements as collective %d; member %d issued op %d (reduce %d, root %d, dtype %d) of %d elements as collective %d",
			g.me, c.op, c.desc[0], c.desc[1], c.desc[2], c.desc[3], c.n, c.seq, q, theirs[0], theirs[1], theirs[2], theirs[3], n, seq-1)
		return g.fail(kindArgs, q, c.op, why)
	}
	c.checked[q] = true
	return nil
}

// rounds runs S slices of a collective of len(phases) phases in rounds:
// round r waits until every member has published round r − 1, then runs
// phase i of slice r − i for each phase, last phase first, in slot
// (slice + slices before) mod Depth, and publishes. A peer's slot is read
// only by a phase after the one that wrote it, so in a later round than
// the write: the wait covers every read. And a slot is written again
// Depth ≥ 3 slices later, in a round that starts after every member
// finished the rounds that read it (the last, phase 3's, two rounds after
// the write; a member is at most one round ahead of any other), so slots
// are never overwritten under a reader, across collectives too.
func (c *coll) rounds(S int, phases ...func(k, s int) error) error {
	g := c.g
	d := uint64(g.l().depth)
	base := g.slices
	g.slices += uint64(S)
	var prev uint64
	for r := 0; r < S+len(phases)-1; r++ {
		if r > 0 {
			for q := range g.ranks {
				if q != g.me {
					if err := c.await(q, prev); err != nil {
						return err
					}
				}
			}
			if !c.arrived {
				// Every member has published its first round: each had
				// arrived (the round's phase, a copy into its slot, is
				// counted as the wait for it).
				c.arrived = true
				g.q.Arrived(time.Now())
			}
		}
		for i := len(phases) - 1; i >= 0; i-- {
			if s := r - i; s >= 0 && s < S {
				if err := phases[i](int((base+uint64(s))%d), s); err != nil {
					return err
				}
			}
		}
		prev = c.publish()
	}
	return nil
}

// publish announces this member's next step and returns it.
func (c *coll) publish() uint64 {
	g := c.g
	g.steps++
	g.counter(g.me).store(uint32(g.steps))
	return g.steps
}

// await waits until member q has published step s, checking its
// descriptor the first time.
func (c *coll) await(q int, s uint64) error {
	if err := c.g.awaitStep(q, s, c.op); err != nil {
		return err
	}
	return c.checkDesc(q)
}

// slot is member q's staging slot k.
func (c *coll) slot(q, k int) []byte {
	l := c.g.l()
	return c.g.seg.m.at(l.staging(q, k), l.slice)
}

// slices is how many slices of per elements cover n (at least one, so
// that an empty collective still meets its peers).
func slices(n, per int) int { return max(1, (n+per-1)/per) }

// chunk returns the bounds of chunk r of n elements split p ways, aligned
// down to 16 elements (64 bytes of fp32) so members write separate cache
// lines (as comm/local).
func chunk(n, p, r int) (lo, hi int) {
	lo = (r * n / p) &^ 15
	if r == p-1 {
		return lo, n
	}
	return lo, ((r + 1) * n / p) &^ 15
}

// copyFrom copies elements [lo, hi) of b into dst.
func copyFrom(dst []byte, b comm.Buf, lo, hi int) {
	es := b.DType().Size()
	src := bytesOf(b)[lo*es : hi*es]
	// In pieces under 1 MiB: Go's memmove switches to non-temporal stores
	// at 1 MiB, which would send the slot, read next by a peer, out of
	// the cache to memory.
	for len(src) > 0 {
		n := copy(dst, src[:min(len(src), stagePiece)])
		dst, src = dst[n:], src[n:]
	}
}

// stagePiece is the largest copy into a staging slot.
const stagePiece = 512 << 10

// copyTo copies src into elements [lo, hi) of b.
func copyTo(b comm.Buf, lo, hi int, src []byte) {
	es := b.DType().Size()
	copy(bytesOf(b)[lo*es:hi*es], src)
}
