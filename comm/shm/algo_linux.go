package shm

import (
	"trellis/comm"
)

// The algorithms, for p members, slices of S bytes (SliceBytes) and e the
// element size. Each slice covers the same elements on every member.
//
//	AllReduce      slice of S/e elements, cut into p chunks (comm/local's
//	               chunking). 1: each member copies chunks q ≠ me into its
//	               slot; 2: member me folds chunk me of every member — its
//	               own from its buffer, the others' from their slots — in
//	               rank order 0, 1, …, p−1 (comm.ReduceTo: one fold, so the
//	               bits are comm/local's), into its buffer and its slot;
//	               3: it copies chunk q of member q's slot, the folded
//	               chunk, into its buffer. Each member copies (p−1)/p of the
//	               buffer in and out and folds 1/p of it p ways.
//	ReduceScatter  per slice, t = S/(p·e) elements of every chunk. 1: copy
//	               chunks q ≠ me into the slot; 2: fold chunk me in rank
//	               order from the slots (and the own src) into dst.
//	AllGather      per slice, S/e elements of src. 1: copy into the slot;
//	               2: copy every member's slot into its chunk of dst.
//	Broadcast      per slice, S/e elements. 1: the root copies into its
//	               slot; 2: the others copy it out.
//	AllToAll       per slice, t = S/(p·e) elements of every chunk. 1: copy
//	               chunk q ≠ me into the slot's part q; 2: copy part me of
//	               member q's slot into chunk q of dst.
//	Barrier        one step; every member waits for every other's.
//
// A phase waits only for the members whose slots it reads; the next use of
// a slot waits for every member to finish the slice that used it last.

func (g *group) allReduce(buf comm.Buf, op comm.ReduceOp) error {
	p, me, n, dt := g.Size(), g.me, buf.Len(), buf.DType()
	if p == 1 {
		return nil // Avg over one member is the identity
	}
	es := dt.Size()
	per := g.l().slice / es
	c := g.begin("allreduce", op, 0, dt, n)
	srcs := make([]comm.Buf, p)
	for lo := 0; lo == 0 || lo < n; lo += per {
		hi := min(lo+per, n)
		h := hi - lo
		if err := c.slice(); err != nil {
			return err
		}
		mine := c.slot(me)
		for q := range p {
			if q != me {
				a, b := chunk(h, p, q)
				copyIn(mine[a*es:b*es], buf, lo+a, lo+b)
			}
		}
		c.publish()
		a, b := chunk(h, p, me)
		for q := range p {
			if q == me {
				srcs[q] = buf.Slice(lo+a, lo+b)
				continue
			}
			if err := c.await(q); err != nil {
				return err
			}
			srcs[q] = asBuf(c.slot(q)[a*es:], dt, b-a)
		}
		if b > a {
			comm.ReduceTo([]comm.Buf{buf.Slice(lo+a, lo+b), asBuf(mine[a*es:], dt, b-a)}, srcs, op, p)
		}
		c.publish()
		for q := range p {
			if q == me {
				continue
			}
			if err := c.await(q); err != nil {
				return err
			}
			qa, qb := chunk(h, p, q)
			copyOut(buf, lo+qa, lo+qb, c.slot(q)[qa*es:qb*es])
		}
		c.publish()
		c.endSlice()
	}
	return nil
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
	for lo := 0; lo == 0 || lo < m; lo += per {
		hi := min(lo+per, m)
		h := hi - lo
		if err := c.slice(); err != nil {
			return err
		}
		mine := c.slot(me)
		for q := range p {
			if q != me {
				copyIn(mine[q*per*es:(q*per+h)*es], src, q*m+lo, q*m+hi)
			}
		}
		c.publish()
		for q := range p {
			if q == me {
				srcs[q] = src.Slice(me*m+lo, me*m+hi)
				continue
			}
			if err := c.await(q); err != nil {
				return err
			}
			srcs[q] = asBuf(c.slot(q)[me*per*es:], dt, h)
		}
		if h > 0 {
			comm.Reduce(dst.Slice(lo, hi), srcs, op, p)
		}
		c.publish()
		c.endSlice()
	}
	return nil
}

func (g *group) allGather(dst, src comm.Buf) error {
	p, me, m, dt := g.Size(), g.me, src.Len(), src.DType()
	own := dst.Slice(me*m, (me+1)*m)
	if p == 1 {
		if !sameBuf(own, src) {
			copy(bytesOf(own), bytesOf(src))
		}
		return nil
	}
	es := dt.Size()
	per := g.l().slice / es
	c := g.begin("allgather", 0, 0, dt, m)
	for lo := 0; lo == 0 || lo < m; lo += per {
		hi := min(lo+per, m)
		if err := c.slice(); err != nil {
			return err
		}
		copyIn(c.slot(me), src, lo, hi)
		c.publish()
		for q := range p {
			if q == me {
				continue
			}
			if err := c.await(q); err != nil {
				return err
			}
			copyOut(dst, q*m+lo, q*m+hi, c.slot(q)[:(hi-lo)*es])
		}
		c.publish()
		c.endSlice()
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
	for lo := 0; lo == 0 || lo < n; lo += per {
		hi := min(lo+per, n)
		if err := c.slice(); err != nil {
			return err
		}
		if me == root {
			copyIn(c.slot(me), buf, lo, hi)
		}
		c.publish()
		if me != root {
			if err := c.await(root); err != nil {
				return err
			}
			copyOut(buf, lo, hi, c.slot(root)[:(hi-lo)*es])
		}
		c.publish()
		c.endSlice()
	}
	return nil
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
	for lo := 0; lo == 0 || lo < m; lo += per {
		hi := min(lo+per, m)
		h := hi - lo
		if err := c.slice(); err != nil {
			return err
		}
		mine := c.slot(me)
		for q := range p {
			if q != me {
				copyIn(mine[q*per*es:(q*per+h)*es], src, q*m+lo, q*m+hi)
			}
		}
		c.publish()
		for q := range p {
			if q == me {
				continue
			}
			if err := c.await(q); err != nil {
				return err
			}
			copyOut(dst, q*m+lo, q*m+hi, c.slot(q)[me*per*es:(me*per+h)*es])
		}
		c.publish()
		c.endSlice()
	}
	return nil
}

func (g *group) barrier() error {
	if g.Size() == 1 {
		return nil
	}
	c := g.begin("barrier", 0, 0, 0, 0)
	if err := c.slice(); err != nil {
		return err
	}
	c.publish()
	for q := range g.ranks {
		if q != g.me {
			if err := c.await(q); err != nil {
				return err
			}
		}
	}
	c.endSlice()
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
