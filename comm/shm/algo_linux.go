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
//	               buffer in and out and folds 1/p of it p ways. Order:
//	               A₀ B₀ A₁ C₀ B₁ A₂ C₁ …
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
//	Barrier        one step; every member waits for every other's.
//
// Two-phase operations run A₀ A₁ B₀ A₂ B₁ … A phase waits only for the
// members whose slots it reads; the next use of a slot waits for every
// member to finish the slice that used it last.

func (g *group) allReduce(buf comm.Buf, op comm.ReduceOp) error {
	p, me, n, dt := g.Size(), g.me, buf.Len(), buf.DType()
	if p == 1 {
		return nil // Avg over one member is the identity
	}
	es := dt.Size()
	per := g.l().slice / es
	c := g.begin("allreduce", op, 0, dt, n)
	bounds := func(s int) (lo, h int) { lo = s * per; return lo, min(lo+per, n) - lo }
	// copyIn is phase A of slice s: its chunks q ≠ me into a fresh slot.
	copyIn := func(s int) (int, uint64, error) {
		k, err := c.acquire()
		if err != nil {
			return 0, 0, err
		}
		lo, h := bounds(s)
		mine := c.slot(me, k)
		for q := range p {
			if q != me {
				a, b := chunk(h, p, q)
				copyFrom(mine[a*es:b*es], buf, lo+a, lo+b)
			}
		}
		return k, c.publish(), nil
	}
	srcs := make([]comm.Buf, p)
	S := slices(n, per)
	ahead := c.runAhead(S, copyIn)
	for s := 0; s < S; s++ {
		k, stepA, err := ahead.next()
		if err != nil {
			return err
		}
		lo, h := bounds(s)
		a, b := chunk(h, p, me)
		for q := range p {
			if q == me {
				srcs[q] = buf.Slice(lo+a, lo+b)
				continue
			}
			if err := c.await(q, stepA); err != nil {
				return err
			}
			srcs[q] = asBuf(c.slot(q, k)[a*es:], dt, b-a)
		}
		if b > a {
			comm.ReduceTo([]comm.Buf{buf.Slice(lo+a, lo+b), asBuf(c.slot(me, k)[a*es:], dt, b-a)}, srcs, op, p)
		}
		stepB := c.publish()
		if err := ahead.fill(); err != nil {
			return err
		}
		for q := range p {
			if q == me {
				continue
			}
			if err := c.await(q, stepB); err != nil {
				return err
			}
			qa, qb := chunk(h, p, q)
			copyTo(buf, lo+qa, lo+qb, c.slot(q, k)[qa*es:qb*es])
		}
		c.publish()
		c.release(k)
	}
	return nil
}

// ahead runs phase A (the copy into a slot) up to Depth−1 slices ahead of
// the slice being finished, so that a member that is ahead of a peer keeps
// working instead of waiting (every member keeps the same distance, so
// their steps still line up).
type ahead struct {
	c       *coll
	S, done int // slices, slices whose phase A ran
	in      func(s int) (k int, step uint64, err error)
	ks      []int
	steps   []uint64
}

func (c *coll) runAhead(S int, in func(s int) (int, uint64, error)) *ahead {
	return &ahead{c: c, S: S, in: in}
}

// fill runs phase A until Depth−1 slices are ahead (or all have run).
func (a *ahead) fill() error {
	for len(a.ks) < max(len(a.c.g.ends)-1, 1) && a.done < a.S {
		k, step, err := a.in(a.done)
		if err != nil {
			return err
		}
		a.ks, a.steps, a.done = append(a.ks, k), append(a.steps, step), a.done+1
	}
	return nil
}

// next is the oldest slice's slot and the step its phase A published.
func (a *ahead) next() (int, uint64, error) {
	if err := a.fill(); err != nil {
		return 0, 0, err
	}
	k, step := a.ks[0], a.steps[0]
	a.ks, a.steps = a.ks[1:], a.steps[1:]
	return k, step, nil
}

// twoPhase runs S slices of a two-phase operation: in(k, s) is phase A of
// slice s into this member's slot k, out(k, s, step) is phase B, which
// reads peers' slots k once they have published step (their phase A).
// Phase A runs ahead as in the all-reduce.
func (c *coll) twoPhase(S int, in func(k, s int), out func(k, s int, step uint64) error) error {
	ah := c.runAhead(S, func(s int) (int, uint64, error) {
		k, err := c.acquire()
		if err != nil {
			return 0, 0, err
		}
		in(k, s)
		return k, c.publish(), nil
	})
	for s := 0; s < S; s++ {
		k, stepA, err := ah.next()
		if err != nil {
			return err
		}
		if err := ah.fill(); err != nil {
			return err
		}
		if err := out(k, s, stepA); err != nil {
			return err
		}
		c.publish()
		c.release(k)
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
	return c.twoPhase(slices(m, per), func(k, s int) {
		lo, hi := s*per, min((s+1)*per, m)
		mine := c.slot(me, k)
		for q := range p {
			if q != me {
				copyFrom(mine[q*per*es:(q*per+hi-lo)*es], src, q*m+lo, q*m+hi)
			}
		}
	}, func(k, s int, step uint64) error {
		lo, hi := s*per, min((s+1)*per, m)
		for q := range p {
			if q == me {
				srcs[q] = src.Slice(me*m+lo, me*m+hi)
				continue
			}
			if err := c.await(q, step); err != nil {
				return err
			}
			srcs[q] = asBuf(c.slot(q, k)[me*per*es:], dt, hi-lo)
		}
		if hi > lo {
			comm.Reduce(dst.Slice(lo, hi), srcs, op, p)
		}
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
		err := c.twoPhase(slices(m, per), func(k, s int) {
			copyFrom(c.slot(me, k), src, s*per, min((s+1)*per, m))
		}, func(k, s int, step uint64) error {
			lo, hi := s*per, min((s+1)*per, m)
			for q := range p {
				if q == me {
					continue
				}
				if err := c.await(q, step); err != nil {
					return err
				}
				copyTo(dst, q*m+lo, q*m+hi, c.slot(q, k)[:(hi-lo)*es])
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
	return c.twoPhase(slices(n, per), func(k, s int) {
		if me == root {
			copyFrom(c.slot(me, k), buf, s*per, min((s+1)*per, n))
		}
	}, func(k, s int, step uint64) error {
		if me == root {
			return nil
		}
		if err := c.await(root, step); err != nil {
			return err
		}
		lo, hi := s*per, min((s+1)*per, n)
		copyTo(buf, lo, hi, c.slot(root, k)[:(hi-lo)*es])
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
	return c.twoPhase(slices(m, per), func(k, s int) {
		lo, hi := s*per, min((s+1)*per, m)
		mine := c.slot(me, k)
		for q := range p {
			if q != me {
				copyFrom(mine[q*per*es:(q*per+hi-lo)*es], src, q*m+lo, q*m+hi)
			}
		}
	}, func(k, s int, step uint64) error {
		lo, hi := s*per, min((s+1)*per, m)
		for q := range p {
			if q == me {
				continue
			}
			if err := c.await(q, step); err != nil {
				return err
			}
			copyTo(dst, q*m+lo, q*m+hi, c.slot(q, k)[me*per*es:(me*per+hi-lo)*es])
		}
		return nil
	})
}

func (g *group) barrier() error {
	if g.Size() == 1 {
		return nil
	}
	c := g.begin("barrier", 0, 0, 0, 0)
	k, err := c.acquire()
	if err != nil {
		return err
	}
	step := c.publish()
	for q := range g.ranks {
		if q != g.me {
			if err := c.await(q, step); err != nil {
				return err
			}
		}
	}
	c.release(k)
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
