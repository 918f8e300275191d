package tcp

import (
	"trellis/comm"
	"trellis/tensor"
)

// directBytes: a collective whose traffic per rank, n·(p-1) bytes when every
// rank sends its whole buffer to every other, stays within this uses the
// one-step direct algorithms; larger ones use the ring.
const directBytes = 64 << 10

// Reductions are bit-identical to comm/local's: every element is
// comm.Reduce of the p ranks' values folded in rank order 0, 1, …, p-1
// (fp32 addition is commutative but not associative, so the order is part
// of the result). A ring reduce-scatter folds chunk c in ring order c+1,
// c+2, …, c, a rotation of rank order, which equals rank order bit for bit
// only when p = 2 (x⊕y = y⊕x); with p ≥ 3 the reductions therefore go
// direct at every size: each rank receives its chunk from every other and
// folds it in rank order, piece by piece as the pieces arrive. The traffic
// per rank is the ring's, (p-1)/p of the buffer; only the all-gather half
// of a large all-reduce, which moves values without combining them, still
// rides the ring.

func reduceOf(dt tensor.DType, op comm.ReduceOp) *reducer {
	return &reducer{dt: dt, op: op}
}

// ringReduces reports whether p ranks may reduce a large buffer on the
// ring: only for p = 2, where ring order is rank order up to commutation.
func ringReduces(p int) bool { return p == 2 }

// allReduce: buf ← op over ranks of buf.
func (o *op) allReduce(buf comm.Buf, rop comm.ReduceOp) error {
	b, es, p := bytesOf(buf), buf.DType().Size(), o.size()
	if p == 1 {
		return nil // Avg over one rank is the identity
	}
	red := reduceOf(buf.DType(), rop)
	if len(b)*(p-1) <= directBytes || buf.Len() < p {
		return o.directReduce(b, func(int) []byte { return b }, es, red)
	}
	bounds := comm.Partition(buf.Len(), p)
	if ringReduces(p) {
		rg := o.newRing(b, es, bounds, 0, 2*(p-1))
		return rg.run(rg.post(red), func(t int, x []byte) {
			if t == p-1 {
				red.finish(x, p) // this rank's chunk, fully reduced
			}
		})
	}
	chunk := func(j int) []byte { return b[bounds[j]*es : bounds[j+1]*es] }
	if err := o.directReduce(chunk(o.me()), chunk, es, red); err != nil {
		return err
	}
	rg := o.newRing(b, es, bounds, p-1, p-1)
	return rg.run(rg.post(nil), nil)
}

// directReduce: every rank sends chunk(j) of its buffer to rank j and folds
// the chunk(r) it receives from each rank, with its own, in rank order 0,
// 1, …, p-1 into dst (len(chunk(r)) bytes; scaled by comm.AvgScale(p) for
// Avg), so every rank computes the same sums in the same order as
// comm/local. chunk(j) may be the whole buffer for every j (all-reduce);
// dst may be chunk(r) itself (in place). Every chunk(j) has the same length
// on every rank. When the chunks are disjoint, piece k is folded as soon as
// piece k has arrived from every rank.
func (o *op) directReduce(dst []byte, chunk func(j int) []byte, es int, red *reducer) error {
	p, r := o.size(), o.me()
	own := chunk(r)
	n := len(own)
	slots := o.g.buf(p * n)
	srcs := make([][]byte, p)
	in := make([][]*req, p)
	for j := 0; j < p; j++ {
		if j != r {
			srcs[j] = slots[j*n : (j+1)*n]
			in[j] = o.recvMsg(j, srcs[j], es, nil, 0)
		}
	}
	srcs[r] = own
	shared := false // every rank gets the whole buffer: dst is being sent
	for i := 1; i < p; i++ {
		j := mod(r+i, p)
		c := chunk(j)
		shared = shared || (n > 0 && &c[0] == &own[0])
		o.sendMsg(j, c, es, 0)
	}
	if shared {
		if err := o.waitEach(o.reqs); err != nil {
			return err
		}
		red.fold(dst[:n], srcs, p)
		return nil
	}
	step := pieceBytes / es * es
	parts := make([][]byte, p)
	for k, off := 0, 0; k == 0 || off < n; k, off = k+1, off+step {
		end := min(off+step, n)
		for j := range in {
			if j != r {
				if err := o.wait(in[j][k]); err != nil {
					return err
				}
			}
		}
		for j, s := range srcs {
			parts[j] = s[off:end]
		}
		red.fold(dst[off:end], parts, p)
	}
	return o.waitEach(o.reqs) // the sends too: the caller may reuse the chunks
}

// reduceScatter: dst ← chunk r of op over ranks of src.
func (o *op) reduceScatter(dst, src comm.Buf, rop comm.ReduceOp) error {
	d, s, es, p := bytesOf(dst), bytesOf(src), dst.DType().Size(), o.size()
	red := reduceOf(dst.DType(), rop)
	n := len(d)
	switch {
	case p == 1:
		copy(d, s)
		return nil
	case n*(p-1) <= directBytes || !ringReduces(p):
		return o.directReduce(d, func(j int) []byte { return s[j*n : (j+1)*n] }, es, red)
	default:
		work := o.g.buf(len(s))
		copy(work, s)
		rg := o.newRing(work, es, comm.Partition(src.Len(), p), 0, p-1)
		rs := rg.post(red)
		if err := rg.run(rs, nil); err != nil {
			return err
		}
		if err := o.waitEach(rs[p-2]); err != nil {
			return err
		}
		copy(d, rg.chunk(o.me()))
		red.finish(d, p)
	}
	return nil
}

// allGather: dst[j·n:(j+1)·n] ← src of rank j.
func (o *op) allGather(dst, src comm.Buf) error {
	d, s, es, p, r := bytesOf(dst), bytesOf(src), src.DType().Size(), o.size(), o.me()
	n := len(s)
	copy(d[r*n:(r+1)*n], s)
	if p == 1 {
		return nil
	}
	if n*(p-1) <= directBytes {
		for j := 0; j < p; j++ {
			if j != r {
				o.recvMsg(j, d[j*n:(j+1)*n], es, nil, 0)
			}
		}
		for i := 1; i < p; i++ {
			o.sendMsg(mod(r+i, p), s, es, 0)
		}
		return nil
	}
	rg := o.newRing(d, es, comm.Partition(dst.Len(), p), p-1, p-1)
	return rg.run(rg.post(nil), nil)
}

// broadcast: buf ← buf of root. Small messages (or two ranks) go straight
// from the root; larger ones flow down the chain root, root+1, …, each rank
// forwarding piece k as soon as it has it.
func (o *op) broadcast(buf comm.Buf, root int) error {
	b, es, p, r := bytesOf(buf), buf.DType().Size(), o.size(), o.me()
	if p == 1 {
		return nil
	}
	if len(b) <= directBytes || p == 2 {
		if r != root {
			o.recvMsg(root, b, es, nil, 0)
			return nil
		}
		for i := 1; i < p; i++ {
			o.sendMsg(mod(r+i, p), b, es, 0)
		}
		return nil
	}
	pos := mod(r-root, p)
	var in []*req
	if pos > 0 {
		in = o.recvMsg(mod(r-1, p), b, es, nil, 0)
	}
	if pos == p-1 {
		return nil
	}
	ps := pieces(b, es)
	for k, pc := range ps {
		if in != nil {
			if err := o.wait(in[k]); err != nil {
				return err
			}
		}
		o.send(mod(r+1, p), pc, k == len(ps)-1, 0)
	}
	return nil
}

// allToAll: dst[j·n:(j+1)·n] ← src[r·n:(r+1)·n] of rank j, every pair at once.
func (o *op) allToAll(dst, src comm.Buf) error {
	d, s, es, p, r := bytesOf(dst), bytesOf(src), src.DType().Size(), o.size(), o.me()
	n := len(s) / p
	for j := 0; j < p; j++ {
		if j != r {
			o.recvMsg(j, d[j*n:(j+1)*n], es, nil, 0)
		}
	}
	copy(d[r*n:(r+1)*n], s[r*n:(r+1)*n])
	for i := 1; i < p; i++ {
		j := mod(r+i, p)
		o.sendMsg(j, s[j*n:(j+1)*n], es, 0)
	}
	return nil
}

// barrier: dissemination. In round k rank r signals r+2^k and waits for
// r-2^k; after ⌈log2 p⌉ rounds every rank has heard, transitively, from all.
func (o *op) barrier() error {
	p, r := o.size(), o.me()
	for k := 1; k < p; k <<= 1 {
		o.send(mod(r+k, p), nil, true, 0)
		if err := o.wait(o.recv(mod(r-k, p), nil, nil, true, 0)); err != nil {
			return err
		}
	}
	return nil
}
