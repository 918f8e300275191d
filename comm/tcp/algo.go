package tcp

import (
	"trellis/comm"
	"trellis/tensor"
)

// directBytes: a collective whose traffic per rank, n·(p-1) bytes when every
// rank sends its whole buffer to every other, stays within this uses the
// one-step direct algorithms; larger ones use the ring.
const directBytes = 64 << 10

func reduceOf(dt tensor.DType, op comm.ReduceOp) *reducer {
	return &reducer{dt: dt, op: op}
}

// allReduce: buf ← op over ranks of buf.
func (o *op) allReduce(buf comm.Buf, rop comm.ReduceOp) error {
	b, es, p := bytesOf(buf), buf.DType().Size(), o.size()
	if p == 1 {
		return nil // Avg over one rank is the identity
	}
	red := reduceOf(buf.DType(), rop)
	if len(b)*(p-1) <= directBytes || buf.Len() < p {
		return o.directReduce(b, b, es, len(b), red)
	}
	rg := o.newRing(b, es, partition(buf.Len(), p), 0, 2*(p-1))
	return rg.run(rg.post(red), func(t int, x []byte) {
		if t == p-1 {
			red.finish(x, p) // this rank's chunk, fully reduced
		}
	})
}

// directReduce: every rank sends chunk j of src (n bytes at j·stride) to
// rank j and folds the chunks it receives, with its own, in rank order 0,
// 1, …, p-1, so every rank computes the same sums in the same order. With
// len(src) = n the whole src goes to everyone (all-reduce). dst may be src
// (all-reduce) or this rank's chunk of it (in-place reduce-scatter).
func (o *op) directReduce(dst, src []byte, es, n int, red *reducer) error {
	p, r := o.size(), o.me()
	stride := n
	if len(src) == n {
		stride = 0
	}
	slots := o.g.buf(p * n)
	srcs := make([][]byte, p)
	for j := 0; j < p; j++ {
		srcs[j] = slots[j*n : (j+1)*n]
		if j != r {
			o.recvMsg(j, srcs[j], es, nil, 0)
		}
	}
	srcs[r] = src[r*stride : r*stride+n]
	for i := 1; i < p; i++ {
		j := mod(r+i, p)
		o.sendMsg(j, src[j*stride:j*stride+n], es, 0)
	}
	if err := o.waitEach(o.reqs); err != nil {
		return err
	}
	red.fold(dst[:n], srcs, p)
	return nil
}

// reduceScatter: dst ← chunk r of op over ranks of src.
func (o *op) reduceScatter(dst, src comm.Buf, rop comm.ReduceOp) error {
	d, s, es, p := bytesOf(dst), bytesOf(src), dst.DType().Size(), o.size()
	red := reduceOf(dst.DType(), rop)
	switch {
	case p == 1:
		copy(d, s)
		return nil
	case len(d)*(p-1) <= directBytes:
		return o.directReduce(d, s, es, len(d), red)
	default:
		work := o.g.buf(len(s))
		copy(work, s)
		rg := o.newRing(work, es, partition(src.Len(), p), 0, p-1)
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
	rg := o.newRing(d, es, partition(dst.Len(), p), p-1, p-1)
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
