package shm

import (
	"trellis/comm"
)

// The algorithms, for p members, slices of S bytes (SliceBytes) and e the
// element size. Each slice covers the same elements on every member.
//
//	AllReduce      slice of S/e elements, cut into p chunks (comm/local's
//	               chunking). A: each member copies chunks q ≠ me into its
//	               slot; B: member me folds chunk me of every member — its
//	               own from its buffer, the others' from their slots — in
//	               rank order 0, 1, …, p−1 (comm.ReduceTo: one fold, so the
//	               bits are comm/local's), into its buffer and its slot;
//	               C: it copies chunk q of member q's slot, the folded
//	               chunk, into its buffer. Each member copies (p−1)/p of the
//	               buffer in and out and folds 1/p of it p ways.
//	ReduceScatter  per slice, t = S/(p·e) elements of every chunk. A: copy
//	               chunks q ≠ me into the slot; B: fold chunk me in rank
//	               order from the slots (and the own src) into dst.
//	AllGather      per slice, S/e elements of src. A: copy into the slot;
//	               B: copy every member's slot into its chunk of dst.
//	Broadcast      per slice, S/e elements. A: the root copies into its
//	               slot; B: the others copy it out.
//	AllToAll       per slice, t = S/(p·e) elements of every chunk. A: copy
//	               chunk q ≠ me into the slot's part q; B: copy part me of
//	               member q's slot into chunk q of dst.
//	Barrier        one round, then a wait for every member's.
//
// The phases run in rounds (coll.rounds): round r does phase i of slice
// r − i for every phase, then publishes; it starts once every member has
// published round r − 1. So an all-reduce of S slices takes S + 2 rounds,
// one wait each, where a wait per phase would take 3S: on a host with
// more ranks than cores every wait is a hand-over of a core.

func (g *group) allReduce(buf comm.Buf, op comm.ReduceOp) error {
	p, me, n, dt := g.Size(), g.me, buf.Len(), buf.DType()
	if p == 1 {
		return nil // Avg over one member is the identity
	}
	es := dt.Size()
	per := g.l().slice / es
	c := g.begin("allreduce", op, 0, dt, n)
	bounds := func(s int) (lo, h int) { lo = s * per; return lo, min(lo+per, n) - lo }
	srcs := make([]comm.Buf, p)
	return c.rounds(slices(n, per), func(k, s int) error { // A: chunks q ≠ me into the slot
		lo, h := bounds(s)
		mine := c.slot(me, k)
		for q := range p {
			if q != me {
				a, b := chunk(h, p, q)
				copyFrom(mine[a*es:b*es], buf, lo+a, lo+b)
			}
		}
		return nil
	}, func(k, s int) error { // B: fold chunk me
		lo, h := bounds(s)
		a, b := chunk(h, p, me)
		if b == a {
			return nil
		}
		for q := range p {
			if q == me {
				srcs[q] = buf.Slice(lo+a, lo+b)
			} else {
				srcs[q] = asBuf(c.slot(q, k)[a*es:], dt, b-a)
			}
		}
		comm.ReduceTo([]comm.Buf{buf.Slice(lo+a, lo+b), asBuf(c.slot(me, k)[a*es:], dt, b-a)}, srcs, op, p)
		return nil
	}, func(k, s int) error { // C: the other chunks' results
		lo, h := bounds(s)
		for q := range p {
			if q != me {
				qa, qb := chunk(h, p, q)
				copyTo(buf, lo+qa, lo+qb, c.slot(q, k)[qa*es:qb*es])
			}
		}
		return nil
	})
}

func (g *group) reduceScatter(dst, src comm.Buf, op comm.ReduceOp) error {
	p, me, m, dt := g.Size(), g.me, dst.Len(), dst.DType()
	if p == 1 {
		if !sameBuf(dst, src) {
			copy(bytesOf(dst), bytesOf(src))
		}
		return nil
	}
	es := dt.Size()
	per := g.l().slice / (es * p)
	c := g.begin("reducescatter", op, 0, dt, m)
	srcs := make([]comm.Buf, p)
	return c.rounds(slices(m, per), func(k, s int) error {
		lo, hi := s*per, min((s+1)*per, m)
		mine := c.slot(me, k)
		for q := range p {
			if q != me {
				copyFrom(mine[q*per*es:(q*per+hi-lo)*es], src, q*m+lo, q*m+hi)
			}
		}
		return nil
	}, func(k, s int) error {
		lo, hi := s*per, min((s+1)*per, m)
		if hi == lo {
			return nil
		}
		for q := range p {
			if q == me {
				srcs[q] = src.Slice(me*m+lo, me*m+hi)
			} else {
				srcs[q] = asBuf(c.slot(q, k)[me*per*es:], dt, hi-lo)
			}
		}
		comm.Reduce(dst.Slice(lo, hi), srcs, op, p)
		return nil
	})
}

func (g *group) allGather(dst, src comm.Buf) error {
	p, me, m, dt := g.Size(), g.me, src.Len(), src.DType()
	own := dst.Slice(me*m, (me+1)*m)
	if p > 1 {
		es := dt.Size()
		per := g.l().slice / es
		c := g.begin("allgather", 0, 0, dt, m)
		err := c.rounds(slices(m, per), func(k, s int) error {
			copyFrom(c.slot(me, k), src, s*per, min((s+1)*per, m))
			return nil
		}, func(k, s int) error {
			lo, hi := s*per, min((s+1)*per, m)
			for q := range p {
				if q != me {
					copyTo(dst, q*m+lo, q*m+hi, c.slot(q, k)[:(hi-lo)*es])
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if !sameBuf(own, src) {
		copy(bytesOf(own), bytesOf(src))
	}
	return nil
}

func (g *group) broadcast(buf comm.Buf, root int) error {
	p, me, n, dt := g.Size(), g.me, buf.Len(), buf.DType()
	if p == 1 {
		return nil
	}
	es := dt.Size()
	per := g.l().slice / es
	c := g.begin("broadcast", 0, root, dt, n)
	return c.rounds(slices(n, per), func(k, s int) error {
		if me == root {
			copyFrom(c.slot(me, k), buf, s*per, min((s+1)*per, n))
		}
		return nil
	}, func(k, s int) error {
		if me != root {
			lo, hi := s*per, min((s+1)*per, n)
			copyTo(buf, lo, hi, c.slot(root, k)[:(hi-lo)*es])
		}
		return nil
	})
}

func (g *group) allToAll(dst, src comm.Buf) error {
	p, me, dt := g.Size(), g.me, src.DType()
	m := src.Len() / p
	copy(bytesOf(dst.Slice(me*m, (me+1)*m)), bytesOf(src.Slice(me*m, (me+1)*m)))
	if p == 1 {
		return nil
	}
	es := dt.Size()
	per := g.l().slice / (es * p)
	c := g.begin("alltoall", 0, 0, dt, m)
	return c.rounds(slices(m, per), func(k, s int) error {
		lo, hi := s*per, min((s+1)*per, m)
		mine := c.slot(me, k)
		for q := range p {
			if q != me {
				copyFrom(mine[q*per*es:(q*per+hi-lo)*es], src, q*m+lo, q*m+hi)
			}
		}
		return nil
	}, func(k, s int) error {
		lo, hi := s*per, min((s+1)*per, m)
		for q := range p {
			if q != me {
				copyTo(dst, q*m+lo, q*m+hi, c.slot(q, k)[me*per*es:(me*per+hi-lo)*es])
			}
		}
		return nil
	})
}

func (g *group) barrier() error {
	if g.Size() == 1 {
		return nil
	}
	c := g.begin("barrier", 0, 0, 0, 0)
	if err := c.rounds(1, func(int, int) error { return nil }); err != nil {
		return err
	}
	for q := range g.ranks { // every member has published the barrier's round
		if q != g.me {
			if err := c.await(q, g.steps); err != nil {
				return err
			}
		}
	}
	return nil
}

// sameBuf reports whether a and b are the same elements (an in-place
// chunk).
func sameBuf(a, b comm.Buf) bool {
	if a.Len() != b.Len() || a.Len() == 0 {
		return a.Len() == b.Len()
	}
	return &bytesOf(a)[0] == &bytesOf(b)[0]
}
